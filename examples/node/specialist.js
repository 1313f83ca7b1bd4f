// A callboard specialist in Node.js, written from PROTOCOL.md alone (node-redis).
// It does what a cue's action says (PROTOCOL.md, "Conformance actions"), so the conformance
// kit can test it: node specialist.js AGENT   (REDIS_URL, CALLBOARD_PREFIX; or CALLBOARD_AGENT)
import { createClient } from 'redis';
import { randomBytes } from 'node:crypto';

const P = process.env.CALLBOARD_PREFIX ?? 'cb:';
const AGENT = process.argv[2] ?? process.env.CALLBOARD_AGENT;
const REPLICA = process.env.CALLBOARD_REPLICA ?? `node-${process.pid}`;
const MIN_IDLE_MS = Number(process.env.CALLBOARD_MIN_IDLE_MS ?? 30000);
const MAX_DELIVERIES = Number(process.env.CALLBOARD_MAX_DELIVERIES ?? 5);
const INBOX = `${P}in:{${AGENT}}`, OUT = `${P}out:{${AGENT}}`, BROADCAST = `${P}broadcast`;
const done = (token) => `${P}done:{${AGENT}}:${token}`;

const db = await createClient({ url: process.env.REDIS_URL }).connect();
const inboxReader = await db.duplicate().connect(); // blocking reads get their own connections
const broadcastReader = await db.duplicate().connect();
const sleep = (ms, signal) => new Promise((ok, fail) => {
  const timer = setTimeout(ok, ms);
  signal?.addEventListener('abort', () => { clearTimeout(timer); fail(signal.reason); });
});

function uuid7() { // time-ordered ids: 48 bits of milliseconds, then random bits
  const b = randomBytes(16);
  b.writeUIntBE(Date.now(), 0, 6);
  b[6] = (b[6] & 0x0f) | 0x70; b[8] = (b[8] & 0x3f) | 0x80;
  const h = b.toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}
const message = (type, payload, to) => JSON.stringify({
  message_id: uuid7(), message_type: type, from_agent: AGENT, target_agents: [],
  run_id: to?.run_id ?? null, cue_id: to?.cue_id ?? null, in_reply_to: to?.message_id ?? null,
  sent_at: new Date().toISOString(), payload, v: 1,
});
// Answers go out with the XACK of the entry (and a done-marker) in one MULTI.
async function answer(entryId, messages, marker) {
  const tx = db.multi();
  for (const m of messages) tx.xAdd(OUT, '*', { m });
  if (marker) tx.set(done(marker), '1', { NX: true, EX: 7 * 24 * 3600 });
  await tx.xAck(INBOX, AGENT, entryId).exec();
}
const reject = (id, reason, deliveries) => answer(id, [message('status.rejected',
  { entry_id: id, reason, deliveries, replica: REPLICA })]);

const actions = new Map(), handled = new Map(), working = new Map(), inFlight = new Set();
let paused = false, stopping = false;
function firstTime(key) { // remember the last 4096 (phase, run, cue, attempt) handled
  if (handled.has(key)) return false;
  handled.set(key, true);
  if (handled.size > 4096) handled.delete(handled.keys().next().value);
  return true;
}

async function handle(entryId, raw, deliveries = 1) {
  let m;
  try { m = JSON.parse(raw); } catch (e) { return reject(entryId, `undecodable: ${e.message}`, deliveries); }
  const p = m.payload ?? {}, attempt = p.attempt ?? 1, cue = `${m.run_id}|${p.cue_id}|${attempt}`;
  const phase = { 'coord.warning': 'warning', 'coord.standby': 'standby', 'coord.go': 'work', 'task.assign': 'work' }[m.message_type];
  if (phase && !firstTime(`${phase}|${cue}`)) return answer(entryId, []); // a duplicate
  try { await dispatch(entryId, m, p, attempt, cue, deliveries); } catch (e) {
    handled.delete(`${phase}|${cue}`); // left pending: its redelivery must be handled, not skipped
    throw e;
  }
}
async function dispatch(entryId, m, p, attempt, cue, deliveries) {
  switch (m.message_type) {
    case 'coord.warning':
      actions.set(cue, p.action ?? {});
      if (actions.size > 4096) actions.delete(actions.keys().next().value);
      return answer(entryId, [message('ack.warning', { attempt }, m)]);
    case 'coord.standby': {
      const action = actions.get(cue) ?? {};
      await sleep(action.prepare_ms ?? 0);
      const ready = action.ready !== false, reason = ready ? '' : (action.ready_reason ?? 'told not to be ready');
      return answer(entryId, [message('ack.standby', { attempt, ready, reason }, m)]);
    }
    case 'coord.go': case 'task.assign':
      // every GO, whatever its deliveries: a copy may be a new entry
      if (await db.exists(done(`${cue}|outcome`))) return answer(entryId, []);
      return work(entryId, m, cue);
    case 'coord.standdown':
      for (const [key, abort] of working) if (key.startsWith(`${m.run_id}|${p.cue_id}|`)) abort.abort(p.reason);
      return answer(entryId, []);
    case 'status.request':
      return answer(entryId, [message('status.report', { replica: REPLICA, state: paused ? 'paused' : 'running', in_flight: working.size }, m)]);
    case 'task.handoff': return answer(entryId, []);
    default: return reject(entryId, `${m.message_type} is not for a specialist's inbox`, deliveries);
  }
}

async function work(entryId, m, cue) {
  const p = m.payload, action = p.action ?? {}, attempt = p.attempt ?? 1, abort = new AbortController();
  working.set(cue, abort);
  try {
    while (paused) await sleep(100, abort.signal);
    await sleep(action.execute_ms ?? 0, abort.signal);
    if (action.fail === true || (action.fail === 'once' && attempt === 1)) throw new Error('scripted failure');
    const out = Object.entries(action.context ?? {}).map(([key, value]) => message('task.context', { key, value }, m));
    if (action.handoff) out.push(message('task.handoff', { from_agent: AGENT, to_agent: action.handoff.to,
      task_id: p.cue_id, attempt, handoff_context: action.handoff.context ?? {} }, m));
    out.push(message('status.completed', { attempt, result: action.result ?? { echo: action }, replica: REPLICA }, m));
    await answer(entryId, out, `${cue}|outcome`);
  } catch (e) {
    const error = abort.signal.aborted ? `stood down: ${abort.signal.reason ?? ''}` : String(e.message ?? e);
    await answer(entryId, [message('status.failed', { attempt, error, replica: REPLICA }, m)], `${cue}|outcome`);
  } finally { working.delete(cue); }
}

function start(id, raw, deliveries) { // entries are handled side by side: a standdown reaches work
  const task = handle(id, raw, deliveries).catch((e) => console.error(`entry ${id}: ${e}`))
    .finally(() => inFlight.delete(task));
  inFlight.add(task);
}
async function readInbox() { // hold at most 8 entries at once
  while (!stopping) {
    if (inFlight.size >= 8) { await Promise.race(inFlight); continue; }
    const got = await inboxReader.xReadGroup(AGENT, REPLICA, { key: INBOX, id: '>' }, { COUNT: 8 - inFlight.size, BLOCK: 1000 });
    for (const { id, message: fields } of got?.[0]?.messages ?? []) start(id, fields.m);
  }
}
async function reclaim() { // a dead replica's entries, idle past MIN_IDLE_MS, come to us
  while (!stopping) {
    const { messages, deletedMessages } = await db.xAutoClaim(INBOX, AGENT, REPLICA, MIN_IDLE_MS, '0-0', { COUNT: 10 });
    if (deletedMessages.length) await db.xAck(INBOX, AGENT, deletedMessages);
    for (const entry of messages.filter((e) => e?.message)) {
      const [{ deliveriesCounter: n }] = await db.xPendingRange(INBOX, AGENT, entry.id, entry.id, 1);
      if (n > MAX_DELIVERIES) await reject(entry.id, `poison: delivered ${n - 1} times`, n - 1);
      else start(entry.id, entry.message.m, n);
    }
    await sleep(1000);
  }
}
async function followBroadcasts(lastId) {
  while (!stopping) {
    const got = await broadcastReader.xRead({ key: BROADCAST, id: lastId }, { COUNT: 100, BLOCK: 1000 });
    for (const { id, message: fields } of got?.[0]?.messages ?? []) {
      lastId = id;
      const m = JSON.parse(fields.m);
      if (m.target_agents?.length && !m.target_agents.includes(AGENT)) continue;
      if (m.message_type === 'broadcast.pause') paused = true;
      if (m.message_type === 'broadcast.resume') paused = false;
      if (m.message_type === 'broadcast.shutdown') stopping = true;
    }
  }
}

await db.xGroupCreate(INBOX, AGENT, '0', { MKSTREAM: true }).catch((e) => { if (!String(e).includes('BUSYGROUP')) throw e; });
const [newest] = await db.xRevRange(BROADCAST, '+', '-', { COUNT: 1 });
await db.xAdd(OUT, '*', { m: message('status.online', { replica: REPLICA, kind: 'node', concurrency: 1,
  contract: { requires: [], provides: [], handoff_to: [], description: 'the Node.js example' } }) });
process.on('SIGTERM', () => { stopping = true; });
process.on('SIGINT', () => { stopping = true; });
await Promise.all([readInbox(), reclaim(), followBroadcasts(newest?.id ?? '0-0')]);
await Promise.all(inFlight); // let work in progress report before leaving
await db.xAdd(OUT, '*', { m: message('status.offline', { replica: REPLICA, reason: 'stopped' }) });
await Promise.all([db, inboxReader, broadcastReader].map((c) => c.quit()));

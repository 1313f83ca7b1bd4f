# One image for every callboard service: the hub and the specialists differ only in `command`.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY protocols ./protocols
COPY hub ./hub
COPY specialists ./specialists
COPY callboard ./callboard
COPY cuelists ./cuelists
RUN pip install . && useradd --system --uid 10001 callboard && mkdir /acl && chown callboard /acl
USER callboard
EXPOSE 8080
CMD ["callboard", "hub", "--host", "0.0.0.0", "--port", "8080"]

# One image for every callboard service: the hub and the specialists differ only in `command`.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml README.md requirements.lock ./
COPY protocols ./protocols
COPY hub ./hub
COPY specialists ./specialists
COPY callboard ./callboard
COPY cuelists ./cuelists
# the tested versions (requirements.lock), as scripts/_venv.sh installs them
RUN pip install -c requirements.lock . && useradd --system --uid 10001 callboard && mkdir /acl && chown callboard /acl
USER callboard
EXPOSE 8080
CMD ["callboard", "hub", "--host", "0.0.0.0", "--port", "8080"]

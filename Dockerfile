# One image for every sagaflow process (coordinator, relay, API, example participants);
# compose.yaml picks the process with `command`. The example participants run from /app
# (`python -m examples...`): they are not part of the installed wheel.
FROM python:3.11-slim

# PYTHONPATH: console scripts (sagaflow-coordinator ...) find the saga modules in /app too.
ENV PYTHONPATH=/app \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY . .
# PYTHONDONTWRITEBYTECODE keeps the running container from writing .pyc files, so compile
# /app (which PYTHONPATH puts before site-packages) here: otherwise every process start, and
# every cold start of a function built from this image, compiles each module from source.
RUN pip install -c constraints.txt '.[coordinator]' \
    && python -m compileall -q /app \
    && useradd --system --no-create-home sagaflow
USER sagaflow

CMD ["python", "-m", "coordinator", "worker"]

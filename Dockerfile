# One image for every sagaflow process (coordinator, relay, example participants);
# compose.yaml picks the process with `command`.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY . .
RUN pip install . \
    && useradd --system --no-create-home sagaflow
USER sagaflow

CMD ["python", "-m", "coordinator", "worker"]

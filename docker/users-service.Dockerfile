# The demo user-profile HTTP service (asynclookup serve), built from the repository:
#   docker build -f docker/users-service.Dockerfile -t asynclookup-users .
# It installs asynclookup and its HTTP connector from the build context (neither is on an index
# yet). A test replays these steps without Docker (tests/packaging/test_docker_images.py).
FROM python:3.11-slim
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY lookup_source ./lookup_source
COPY connectors/http ./connectors/http
RUN pip install --no-cache-dir . ./connectors/http
EXPOSE 8080
HEALTHCHECK --interval=2s --timeout=2s --retries=15 CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/users/1', timeout=2)"]
CMD ["asynclookup", "serve", "--host", "0.0.0.0", "--port", "8080"]

# The demo user-profile HTTP service (asynclookup serve).
FROM python:3.11-slim
WORKDIR /src
COPY pyproject.toml README.md ./
COPY lookup_source ./lookup_source
RUN pip install --no-cache-dir ".[http]"
EXPOSE 8080
CMD ["asynclookup", "serve", "--host", "0.0.0.0", "--port", "8080"]

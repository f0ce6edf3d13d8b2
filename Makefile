# The two commands a newcomer needs:
#   make demo   - set up .venv and run the demo (no services needed)
#   make test   - set up .venv with the test extra and run lint, types and the whole suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install demo test lint unit docs clean

CONNECTORS := connectors/redis connectors/http connectors/postgres
# a third-party connector, installed as a user would install one, so its tests run too
EXAMPLES := examples/sqlite

# The built-in connectors are distributions of their own (asynclookup-redis, ...), which the
# core's extras name. Installed editable in the same pip command as the core, they resolve to
# these folders, not to an index: a clone needs nothing published.
$(VENV)/.installed: pyproject.toml $(addsuffix /pyproject.toml,$(CONNECTORS) $(EXAMPLES))
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]" $(addprefix -e ,$(CONNECTORS) $(EXAMPLES))
	touch $@

install: $(VENV)/.installed

demo: install
	$(PY) -m lookup_source demo $(ARGS)

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

test: lint
	$(PY) -m pytest $(PYTEST_ARGS)

unit: install
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

docs: install
	$(PY) -m lookup_source.docs --write README.md

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache spark-warehouse metastore_db *.egg-info

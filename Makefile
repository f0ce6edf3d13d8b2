# The two commands a newcomer needs:
#   make demo   - set up .venv (asynclookup and its connectors) and run the demo (no service)
#   make test   - set up .venv with the test extra and run lint, types and the whole suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install demo test test-full lint unit docs clean wheelhouse spark-versions spark-oldest jar environments peers sql-versions bench-smoke print-bench-smoke print-oldest print-newest print-sql-versions

# Every supported PySpark minor gets an environment of its own (.venvs/pyspark-<minor>) with the
# newest release of that minor; `make spark-versions` runs the Spark suites on each.
# SPARK_VERSIONS names the minors; the pins are the releases tested last (pyspark==<pin>).
SPARK_VERSIONS ?= 3.5 4.0 4.1 4.2 4.3
SPARK_PIN_3.5 := 3.5.9
SPARK_PIN_4.0 := 4.0.5
SPARK_PIN_4.1 := 4.1.4
SPARK_PIN_4.2 := 4.2.1
SPARK_PIN_4.3 := 4.3.0
SPARK_OLDEST := $(firstword $(SPARK_VERSIONS))
SPARK_NEWEST := $(lastword $(SPARK_VERSIONS))
# the minors between, which have SQL JOINs as lookups (4.1+): CI runs the SQL join suites on
# each of them too (the newest runs every suite, the oldest has no SQL extension)
SQL_SPARK_VERSIONS ?= 4.1 4.2
SQL_SUITES ?= tests/spark/test_sql_joins.py tests/spark/test_sql_join_differential.py \
	tests/spark/test_sql_join_spark_rows.py tests/spark/test_sql_extension_setup.py \
	tests/unit/test_sql_contract.py
# the Python of each environment (OLDEST_PYTHON: the oldest PySpark with the oldest Python)
OLDEST_PYTHON ?= $(PYTHON)
# what the environment of each PySpark runs: every suite but packaging (unit, connector, spark,
# reliability); packaging (wheels, image replay, cluster recipes, demo, bench, the command), the
# cluster budget on local-cluster (each surface's budget runs everywhere) and the engine's
# behaviour at scale or under faults through Spark (marker `once`: store restarts, leaks across
# jobs, adaptive capacity, hedging, OpenTelemetry; the same on any PySpark) run once, in
# `make test`
SPARK_SUITES ?= -m "not packaging and not cluster and not once"

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

# The SQL extension (SQL JOINs against lookup tables run as lookups): its jar, compiled with javac
# against the jars of the pyspark in .venv and packed beside its Java source, where the wheel
# takes it. Without a JDK it is skipped with one line (the extension builds on first use then).
JAR := lookup_source/spark/sql_extension/asynclookup-sql.jar
JAVA_SOURCES := $(wildcard lookup_source/spark/sql_extension/java/asynclookup/sql/*.java)
$(JAR): $(JAVA_SOURCES) | $(VENV)/bin/python
	@$(PY) -m lookup_source sql-extension --build --jar || echo "SQL extension not built (see above)"

jar: $(JAR)

# the demo needs the library and its connectors only, not the test tools
$(VENV)/.demo: pyproject.toml $(addsuffix /pyproject.toml,$(CONNECTORS))
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e . $(addprefix -e ,$(CONNECTORS))
	touch $@

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

demo: $(VENV)/.demo $(JAR)
	$(PY) -m lookup_source demo $(ARGS)

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

test: lint $(JAR)
	$(PY) -m pytest $(PYTEST_ARGS)

# the scale and soak tests at the sizes the docs quote (tests/sizes.py), before a release
test-full:
	ASYNCLOOKUP_TEST_SIZE=full $(MAKE) test spark-versions

# One download per run: every package the environments and the packaging tests install, as
# wheels in $(WHEELHOUSE) (pyspark's sdist built into a wheel once), for the newest PySpark on
# $(PYTHON) and the oldest on $(OLDEST_PYTHON) (`wheelhouse-<minor>`: one of them). Then
# `PIP_NO_INDEX=1 PIP_FIND_LINKS=$(WHEELHOUSE)` installs from it alone, without the network, as
# .ci/run does. The project's own wheels are left out: it is installed from the clone.
WHEELHOUSE ?= .wheelhouse
wheelhouse: wheelhouse-$(SPARK_NEWEST) wheelhouse-$(SPARK_OLDEST) \
	$(addprefix wheelhouse-,$(SQL_SPARK_VERSIONS))

wheelhouse-%:
	$(if $(filter $*,$(SPARK_OLDEST)),$(OLDEST_PYTHON),$(PYTHON)) -m pip wheel --quiet --use-pep517 \
		--wheel-dir $(WHEELHOUSE) ".[test]" $(CONNECTORS) $(EXAMPLES) \
		"pyspark[connect]==$(SPARK_PIN_$*)" pip setuptools wheel venv-pack
	rm -f $(WHEELHOUSE)/asynclookup*.whl
	rm -rf build $(addsuffix /build,$(CONNECTORS) $(EXAMPLES))

unit: install
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

# the bench's smoke run (every scenario, small), which `make test` includes: CI runs it apart,
# in the oldest leg's time (BENCH_SMOKE: its file, which CI's main leg leaves out)
BENCH_SMOKE := tests/packaging/test_bench.py
bench-smoke: install
	$(PY) -m pytest $(BENCH_SMOKE) $(PYTEST_ARGS)

print-bench-smoke:
	@echo $(BENCH_SMOKE)

# .venvs/pyspark-<minor>/.installed: the project, its connectors and test tools, with that PySpark
.venvs/pyspark-%/.installed: pyproject.toml $(addsuffix /pyproject.toml,$(CONNECTORS) $(EXAMPLES))
	$(if $(filter $*,$(SPARK_OLDEST)),$(OLDEST_PYTHON),$(PYTHON)) -m venv .venvs/pyspark-$*
	.venvs/pyspark-$*/bin/python -m pip install --quiet --upgrade pip
	.venvs/pyspark-$*/bin/python -m pip install --quiet -e ".[test]" \
		$(addprefix -e ,$(CONNECTORS) $(EXAMPLES)) "pyspark[connect]==$(SPARK_PIN_$*)"
	touch $@

# kept once made (a pattern rule's prerequisite is otherwise deleted after the run)
.PRECIOUS: .venvs/pyspark-%/.installed

spark-%: .venvs/pyspark-%/.installed
	@echo "== suites on $$(.venvs/pyspark-$*/bin/python -c 'import pyspark, sys; print("PySpark", pyspark.__version__, "on Python", sys.version.split()[0])')"
	.venvs/pyspark-$*/bin/python -m pytest $(SPARK_SUITES) $(PYTEST_ARGS)

spark-versions: $(addprefix spark-,$(SPARK_VERSIONS))

# the SQL join suites (the extension's rule and the differential test) on one minor: its
# differential test writes SQL_DIFF_QUERIES queries of a seed of the minor's own (the newest,
# in `make test`, 48 of the default seed), so each minor tries other shapes
SQL_DIFF_QUERIES ?= 24
sql-%: .venvs/pyspark-%/.installed
	@echo "== SQL join suites on $$(.venvs/pyspark-$*/bin/python -c 'import pyspark; print("PySpark", pyspark.__version__)')"
	ASYNCLOOKUP_SQL_DIFF_QUERIES=$${ASYNCLOOKUP_SQL_DIFF_QUERIES:-$(SQL_DIFF_QUERIES)} \
	ASYNCLOOKUP_SQL_DIFF_SEED=$${ASYNCLOOKUP_SQL_DIFF_SEED:-$(subst .,,$*)20261127} \
		.venvs/pyspark-$*/bin/python -m pytest $(SQL_SUITES) $(PYTEST_ARGS)

sql-versions: $(addprefix sql-,$(SQL_SPARK_VERSIONS))

print-sql-versions:
	@echo $(SQL_SPARK_VERSIONS)

# the oldest and newest PySpark minors (.ci/run makes their environments)
print-oldest:
	@echo $(SPARK_OLDEST)

print-newest:
	@echo $(SPARK_NEWEST)

spark-oldest: spark-$(SPARK_OLDEST)

# the environments of CI's legs (.venv, the oldest PySpark's, and those of the SQL join suites),
# made one after the other
environments: install .venvs/pyspark-$(SPARK_OLDEST)/.installed \
	$(addsuffix /.installed,$(addprefix .venvs/pyspark-,$(SQL_SPARK_VERSIONS)))

# the engines the bench's http-transports scenario compares with (Daft, Ray Data), in an
# environment of their own: asynclookup bench --scenarios http-transports --peers-python
# .venvs/peers/bin/python (typing_extensions: Ray Data's workers import it without requiring it)
peers:
	$(PYTHON) -m venv .venvs/peers
	.venvs/peers/bin/python -m pip install --quiet "daft>=0.7" "ray[data]>=2.50" aiohttp typing_extensions

docs: install
	$(PY) -m lookup_source.docs --write docs/options.md

clean:
	rm -rf $(VENV) .venvs $(WHEELHOUSE) .pytest_cache .mypy_cache .ruff_cache spark-warehouse metastore_db *.egg-info $(JAR)

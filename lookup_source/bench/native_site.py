"""What the bench's native user service (:mod:`.native_service`) serves, and with what: the
nginx binary and its JavaScript module (njs) found on the machine
(:func:`native_service_available`), the users' records as njs answers them (generated from
:func:`~lookup_source.service.user_record`, checked against it), and the ``nginx.conf`` that
serves them."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from functools import cache, lru_cache

from lookup_source.bench.children import ends_with_this_process
from lookup_source.bench.native_gets import (
    ECHO_MODULE_ENV,
    ECHO_MODULE_NAME,
    EchoGets,
    echo_get_http_lines,
    echo_get_locations,
    whole_milliseconds,
)
from lookup_source.service import user_record

PERIOD = 1000
"""The record's fields after ``user_id`` and ``name`` are those of ``id % PERIOD``."""

MODULE_NAME = "ngx_http_js_module.so"
MODULE_DIRS = (
    "/usr/lib/nginx/modules",
    "/usr/lib64/nginx/modules",
    "/usr/share/nginx/modules",
    "/usr/local/nginx/modules",
    "/etc/nginx/modules",
)
NGINX_ENV = "ASYNCLOOKUP_NGINX"
"""The nginx binary to use, instead of the one on PATH (or /usr/sbin/nginx)."""
MODULE_ENV = "ASYNCLOOKUP_NJS_MODULE"
"""The njs module (``ngx_http_js_module.so``) to load, instead of the one found."""

NOT_FOUND = {"error": "no such user"}
BAD_BATCH = {"error": 'expected a JSON object {"keys": [...]}'}
NOT_JSON = {"error": "the body is not JSON"}
PREFIX = "/users/"
BATCH_PATH = "/users/batch"

_LOG_FORMAT = "$msec $request_time $status $connection $keys $request_method $uri"


class NativeServiceUnavailable(RuntimeError):
    """nginx or its njs module is missing here."""


@cache
def nginx_version_text(nginx: str) -> str:
    try:
        done = subprocess.run(
            [nginx, "-V"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError) as error:
        return f"ERROR {error}"
    return done.stdout + done.stderr


def nginx_command(nginx: str, directory: str, conf: str) -> list[str]:
    """nginx in the foreground, its prefix ``directory`` and configuration ``conf``, stopped
    when the process starting it dies (:mod:`.children`)."""
    errors = os.path.join(directory, "error.log")
    return ends_with_this_process(
        [nginx, "-p", directory + os.sep, "-e", errors, "-c", conf, "-g", "daemon off;"]
    )


def nginx_binary() -> str | None:
    named = os.environ.get(NGINX_ENV)
    if named:
        return named if os.access(named, os.X_OK) else None
    found = shutil.which("nginx")
    if found:
        return found
    for path in ("/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx"):
        if os.access(path, os.X_OK):
            return path
    return None


def njs_module(nginx: str) -> tuple[str | None, str | None]:
    """(the module's path, or None when njs is built into nginx; the reason it is missing)."""
    return dynamic_module(nginx, MODULE_NAME, MODULE_ENV, "njs", "libnginx-mod-http-js")


def dynamic_module(
    nginx: str, file_name: str, env: str, name: str, package: str
) -> tuple[str | None, str | None]:
    """(the path of nginx's dynamic module ``file_name``, or None when it is built into
    ``nginx``, an ``--add-module`` holding ``name`` in ``nginx -V``; the reason it is
    missing): the file the environment variable ``env`` names, else the first in
    :func:`module_dirs`."""
    named = os.environ.get(env)
    if named:
        return (named, None) if os.path.isfile(named) else (None, f"{env}={named}: no file")
    version = nginx_version_text(nginx)
    if version.startswith("ERROR "):
        return None, f"{nginx} -V failed: {version[6:]}"
    if re.search(rf"--add-module=\S*{re.escape(name)}\S*", version):
        return None, None  # built in: no load_module
    dirs = module_dirs(version)
    for directory in dirs:
        path = os.path.join(directory, file_name)
        if os.path.isfile(path):
            return path, None
    return None, (
        f"the {name} module ({file_name}) is not in {', '.join(dict.fromkeys(dirs))} "
        f"(Debian: apt-get install {package})"
    )


def module_dirs(version_text: str) -> list[str]:
    """Where nginx's dynamic modules may be: its ``--modules-path``, then the usual places."""
    dirs = list(MODULE_DIRS)
    configured = re.search(r"--modules-path=(\S+)", version_text)
    if configured:
        dirs.insert(0, configured.group(1))
    return dirs


def echo_gets(users: int, latency_ms: float) -> tuple[EchoGets | None, str | None]:
    """(GETs in nginx's own directives, or None; why not): they need nginx's echo module and a
    latency of whole milliseconds (njs answers them otherwise, at more CPU a GET)."""
    nginx = nginx_binary()
    if nginx is None:
        return None, "nginx is not installed"
    if not whole_milliseconds(latency_ms):
        return None, f"echo_sleep waits whole milliseconds, not {latency_ms} ms"
    path, missing = dynamic_module(
        nginx, ECHO_MODULE_NAME, ECHO_MODULE_ENV, "echo", "libnginx-mod-http-echo"
    )
    return (None, missing) if missing else (EchoGets(users, latency_ms, path), None)


GET_HANDLERS = ("auto", "directives", "njs")
"""What may answer the native service's GETs (``NativeUserService(gets=...)``)."""


def checked_gets(gets: str) -> str:
    if gets not in GET_HANDLERS:
        raise ValueError(f"gets: expected one of {', '.join(GET_HANDLERS)}, got {gets!r}")
    return gets


def chosen_gets(gets: str, users: int, latency_ms: float) -> EchoGets | None:
    """The directives that answer GETs as ``gets`` asks, or None (njs answers them)."""
    if checked_gets(gets) == "njs":
        return None
    echo, why_not = echo_gets(users, latency_ms)
    if echo is None and gets == "directives":
        raise NativeServiceUnavailable(f"gets=directives: {why_not}")
    return echo


def native_service_available() -> str | None:
    """None when nginx and its njs module are here, else what is missing (one line)."""
    nginx = nginx_binary()
    if nginx is None:
        where = os.environ.get(NGINX_ENV) or "PATH, /usr/sbin, /usr/local/sbin"
        return f"nginx is not installed (not in {where}; Debian: apt-get install nginx-light)"
    return njs_module(nginx)[1]


# -- the answers -----------------------------------------------------------------------------


def _head(user_id: int) -> str:
    return f'{{"user_id": {user_id}, "name": "user-{user_id}"'


@lru_cache(maxsize=1)
def record_tails() -> tuple[str, ...]:
    """The JSON text after ``name`` of ``user_record(id)`` for ``id`` in ``0 .. PERIOD-1``."""
    tails = []
    for user_id in range(PERIOD):
        body, head = json.dumps(user_record(user_id)), _head(user_id)
        if not body.startswith(head):
            raise RuntimeError(f"user_record({user_id}) no longer starts with user_id, name")
        tails.append(body[len(head) :])
    return tuple(tails)


def record_body(user_id: int) -> str:
    """What the native service answers for ``user_id``, built the way its JavaScript does."""
    return _head(user_id) + record_tails()[user_id % PERIOD]


def check_records(users: int, samples: int = 5_000) -> None:
    """Raise if the native service's answer for a sample of ids (the first and last
    :data:`PERIOD` and an even spread) is not ``json.dumps(user_record(id))``."""
    ids = set(range(min(users, PERIOD)))
    ids.update(range(max(0, users - PERIOD), users))
    ids.update(range(0, users, max(1, users // samples)))
    for user_id in sorted(ids):
        if record_body(user_id) != json.dumps(user_record(user_id)):
            raise RuntimeError(
                f"the native service would answer {record_body(user_id)} for {user_id}, "
                f"user_record says {json.dumps(user_record(user_id))}: its fields after name "
                f"no longer repeat every {PERIOD} ids"
            )


_JS = r"""// Generated by lookup_source/bench/native_service.py: do not edit.
var USERS = %(users)d;
var LATENCY_MS = %(latency_ms)s;
var PERIOD = %(period)d;
var PREFIX = %(prefix)s;
var TAILS = %(tails)s;
var NOT_FOUND = %(not_found)s;
var BAD_BATCH = %(bad_batch)s;
var NOT_JSON = %(not_json)s;
var INTEGER = /^[+-]?[0-9]+(_[0-9]+)*$/;

function known(text) {
    var s = String(text).trim();
    if (!INTEGER.test(s)) {
        return null;
    }
    var n = Number(s.replace(/_/g, ''));
    return n >= 0 && n < USERS ? n : null;
}

function record(n) {
    return '{"user_id": ' + n + ', "name": "user-' + n + '"' + TAILS[n %% PERIOD];
}

function answer(r, status, body) {
    r.headersOut['Content-Type'] = 'application/json; charset=utf-8';
    r.return(status, body);
}

function later(f) {
    if (LATENCY_MS > 0) {
        setTimeout(f, LATENCY_MS);
    } else {
        f();
    }
}

function get(r) {
    if (r.method !== 'GET' && r.method !== 'HEAD') {
        r.return(405);
        return;
    }
    var key = r.uri.substring(PREFIX.length);
    later(function () {
        var n = known(key);
        if (n === null) {
            answer(r, 404, NOT_FOUND);
        } else {
            answer(r, 200, record(n));
        }
    });
}

function batch(r) {
    if (r.method !== 'POST') {
        get(r);
        return;
    }
    var body;
    try {
        body = JSON.parse(r.requestText);
    } catch (e) {
        r.variables.keys = '0';
        answer(r, 400, NOT_JSON);
        return;
    }
    var keys = body !== null && typeof body === 'object' && !Array.isArray(body)
        ? body.keys : undefined;
    if (!Array.isArray(keys)) {
        r.variables.keys = '0';
        answer(r, 400, BAD_BATCH);
        return;
    }
    r.variables.keys = String(keys.length);
    later(function () {
        var parts = [];
        var seen = {};
        for (var i = 0; i < keys.length; i++) {
            var k = keys[i];
            var text = null;
            if (typeof k === 'number' && Number.isInteger(k)) {
                text = String(k);
            } else if (typeof k === 'string') {
                text = k;
            }
            var n = text === null ? null : known(text);
            if (n === null || seen['k' + text]) {
                continue;
            }
            seen['k' + text] = true;
            parts.push(JSON.stringify(text) + ': ' + record(n));
        }
        answer(r, 200, '{' + parts.join(', ') + '}');
    });
}

export default {get, batch};
"""


def users_js(users: int, latency_ms: float) -> str:
    """The njs module answering ``GET /users/{id}`` and ``POST /users/batch``."""
    return _JS % {
        "users": users,
        "latency_ms": repr(float(latency_ms)),
        "period": PERIOD,
        "prefix": json.dumps(PREFIX),
        "tails": json.dumps(list(record_tails())),
        "not_found": json.dumps(json.dumps(NOT_FOUND)),
        "bad_batch": json.dumps(json.dumps(BAD_BATCH)),
        "not_json": json.dumps(json.dumps(NOT_JSON)),
    }


def _without(module: str, version: str) -> bool:
    return f"--without-http_{module}_module" in version


def nginx_conf(
    directory: str,
    port: int,
    module: str | None,
    *,
    worker_processes: int,
    worker_connections: int,
    log_flush_ms: int,
    version_text: str = "",
    gets: EchoGets | None = None,
) -> str:
    """The configuration: every path nginx writes under ``directory``; ``GET {PREFIX}{id}``
    answered by ``gets`` (nginx's own directives) when given, else by njs."""

    def path(name: str) -> str:
        return os.path.join(directory, name)

    temp = [("client_body", "body"), ("proxy", "proxy")]
    temp += [(m, m) for m in ("fastcgi", "uwsgi", "scgi") if not _without(m, version_text)]
    buffered = f" buffer=64k flush={log_flush_ms}ms" if log_flush_ms > 0 else ""
    lines = [
        "# Generated by lookup_source/bench/native_service.py.",
        *(["user root;"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []),
        f"worker_processes {worker_processes};",
        f"worker_rlimit_nofile {max(1024, 2 * worker_connections)};",
        f"pid {path('nginx.pid')};",
        f"lock_file {path('nginx.lock')};",
        f"error_log {path('error.log')} error;",
        *([f"load_module {module};"] if module else []),
        *([f"load_module {gets.module};"] if gets is not None and gets.module else []),
        f"events {{ worker_connections {worker_connections}; }}",
        "http {",
        f"    js_import users from {path('users.js')};",
        f"    log_format bench '{_LOG_FORMAT}';",
        f"    access_log {path('access.log')} bench{buffered};",
        *(f"    {kind}_temp_path {path(name)};" for kind, name in temp),
        "    default_type application/octet-stream;",
        "    server_tokens off;",
        "    merge_slashes off;",  # /users//5 is not /users/5, as in the Python service
        "    keepalive_requests 100000;",
        "    keepalive_timeout 75s;",
        *(echo_get_http_lines(gets.users, record_tails(), PREFIX) if gets is not None else []),
        "    server {",
        f"        listen 127.0.0.1:{port} backlog=1024;",
        "        set $keys 1;",
        *(
            echo_get_locations(PREFIX, gets.latency_ms, json.dumps(NOT_FOUND))
            if gets is not None
            else [f"        location {PREFIX} {{ js_content users.get; }}"]
        ),
        f"        location = {BATCH_PATH} {{",
        "            client_body_buffer_size 1m;",
        "            client_max_body_size 16m;",
        "            js_content users.batch;",
        "        }",
        "        location / { return 404; }",
        "    }",
        "}",
    ]
    return "\n".join(lines) + "\n"

"""The dashboard's web application: server-rendered pages (Jinja2), JSON for the plots (Plotly, served locally).

Reads the study database; the only writes are the notes a user types: POST, JSON bodies of bounded size, from a page
of this dashboard only (the Origin must be this server, and the Host one of its own names, so that neither another
web site nor a DNS-rebinding page can write). Unknown studies and trials give 404 pages.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import re
import socket
import urllib.parse
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import plotly
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException as StarletteHTTPException

from autotune import units, verl
from autotune.dashboard import data, failures, history, importance, plots, profiles, studies, table
from autotune.estimate.throughput import step_error_percent
from autotune.results import memory_trace, rollout_wait
from autotune.results.export import FORMATS
from autotune.results.guessed import guessed_predictions
from autotune.results.labels import provenance
from autotune.results.noise import noise_words
from autotune.results.timeline import Timeline
from autotune.store.schema import FORCED, StudyRow, TrialRow
from autotune.store.store import Store, StoreError

HERE = Path(__file__).resolve().parent
PLOTLY_JS = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
NOTE_MAX_CHARS = 20_000
# JSON may spell one character in up to 12 bytes (a \\uXXXX surrogate pair): the body is refused beyond this.
NOTE_MAX_BYTES = 12 * NOTE_MAX_CHARS + 1024
LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")
SECURITY_HEADERS = {"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin"}
_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.S)


def content_security_policy(template_dir: Path) -> str:
    """Scripts only from this server and the templates' own inline scripts (by hash): markup that slipped into a
    page runs nothing. Plotly compiles WebGL shaders with Function() (hence unsafe-eval) and injects its styles."""
    hashes = []
    for tpl in sorted(template_dir.glob("*.html")):
        for body in _INLINE_SCRIPT.findall(tpl.read_text()):
            if "{{" in body or "{%" in body:
                raise ValueError(f"{tpl.name}: an inline script may not be templated (its hash would change)")
            hashes.append("'sha256-" + base64.b64encode(hashlib.sha256(body.encode()).digest()).decode() + "'")
    return ("default-src 'self'; script-src 'self' 'unsafe-eval' " + " ".join(hashes) + "; "
            "style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; object-src 'none'; base-uri 'none'; "
            "form-action 'self'; frame-ancestors 'none'")
EXPORT_EXT = {"sh": "sh", "yaml": "yaml", "json": "json", "ray": "ray.sh"}


class HeadAsGet:
    """HEAD answers as GET does, headers and status alike, without the body: HTTP asks it of every GET resource
    (monitors and `curl -I` use it), and FastAPI's GET routes answer HEAD with 405."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headers_only(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body":
                if message.get("more_body"):
                    return
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, headers_only)
EXPORT_MEDIA = {"sh": "text/x-shellscript", "yaml": "application/yaml", "json": "application/json",
                "ray": "text/x-shellscript"}


def quote(name: Any) -> str:
    return urllib.parse.quote(str(name), safe="")


def fmt(x: Any, nd: int = units.THROUGHPUT_DECIMALS) -> str:
    """A number as the CLI writes it (autotune.units: the same decimals, no thousands separators)."""
    if x is None:
        return "-"
    try:
        return f"{float(x):.{nd}f}"
    except (TypeError, ValueError):
        return str(x)


def own_host_names(extra: Iterable[str] = ()) -> frozenset[str]:
    """Names under which a browser may reach this server (IP literals are always accepted: no page can rebind one)."""
    names = {*LOOPBACK_NAMES, *extra}
    try:
        names |= {socket.gethostname(), socket.getfqdn()}
    except OSError:
        pass
    return frozenset(n.lower().rstrip(".") for n in names if n)


def _hostname(netloc: str) -> str:
    host = netloc.rsplit("@", 1)[-1]
    if host.startswith("["):
        return host[1:host.find("]")].lower()
    return host.rsplit(":", 1)[0].lower().rstrip(".") if host.count(":") == 1 else host.lower().rstrip(".")


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def write_refusal(headers: Any, allowed_hosts: frozenset[str]) -> str | None:
    """Why a write request must be refused (cross-site, or through a name that is not this server's), or None."""
    host = headers.get("host", "")
    name = _hostname(host)
    if not (_is_ip(name) or name in allowed_hosts):
        return (f"refused: Host {host!r} is not a name of this dashboard (a page of another site may have "
                "rebound its name to this address); open the dashboard by its own address")
    origin = headers.get("origin")
    if origin is not None:
        o = urllib.parse.urlsplit(origin)
        if origin == "null" or o.scheme not in ("http", "https") or o.netloc.lower() != host.lower():
            return f"cross-site request refused: Origin {origin!r} is not this dashboard ({host})"
    site = headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return f"cross-site request refused (Sec-Fetch-Site: {site})"
    return None


def create_app(storage_url: str, store: Store | None = None, hosts: Iterable[str] = ()) -> FastAPI:
    """The dashboard over one database URL (the same URL `autotune run --storage` was given); `hosts`: names it is
    served under besides this machine's (the --host given to `autotune dashboard`)."""
    store = store or Store(storage_url)
    allowed_hosts = own_host_names(hosts)
    app = FastAPI(title="autotune dashboard", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(HeadAsGet)
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.filters["q"] = quote
    templates.env.filters["fmt"] = fmt
    templates.env.globals["provenance"] = provenance
    templates.env.globals["gib"] = units.GIB_DECIMALS
    templates.env.filters["yaml"] = units.yaml_value
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")
    headers = {**SECURITY_HEADERS, "Content-Security-Policy": content_security_policy(HERE / "templates")}

    @app.middleware("http")
    async def no_framing(request: Request, call_next: Any) -> Response:
        """No other site may frame the pages (clicks on "Save note" under a decoy), no type is sniffed into HTML,
        and no script runs but the dashboard's own."""
        response = await call_next(request)
        response.headers.update(headers)
        return response

    def page(request: Request, name: str, status_code: int = 200, **ctx: Any) -> HTMLResponse:
        return templates.TemplateResponse(request, name, {"storage": _safe_url(storage_url), **ctx},
                                          status_code=status_code)

    def get_study(name: str) -> StudyRow:
        row = store.get_study(name)
        if row is None:
            raise HTTPException(404, f"no study named {name!r} in this database")
        return row

    def get_trial(name: str, number: int) -> TrialRow:
        get_study(name)
        row = store.trial(name, number)
        if row is None:
            raise HTTPException(404, f"study {name!r} has no trial {number}")
        return row

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        detail = exc.detail if exc.status_code != 404 or exc.detail != "Not Found" else "no such page"
        if request.url.path.startswith("/api/"):
            return JSONResponse({"detail": detail}, status_code=exc.status_code)
        return page(request, "error.html", status_code=exc.status_code, code=exc.status_code, message=detail)

    @app.exception_handler(RequestValidationError)
    async def bad_id(request: Request, exc: RequestValidationError) -> Response:
        """A trial number that is not a number names no trial: a 404 like any unknown id."""
        where = ", ".join(str(e.get("input")) for e in exc.errors()[:3])
        return await http_error(request, StarletteHTTPException(404, f"no such page ({where!r} is not a valid id)"))

    @app.exception_handler(StoreError)
    async def store_error(request: Request, exc: StoreError) -> Response:
        msg = f"the study database could not be read: {exc}"
        if request.url.path.startswith("/api/"):
            return JSONResponse({"detail": msg}, status_code=503)
        return page(request, "error.html", status_code=503, code=503, message=msg)

    @app.get("/assets/plotly.min.js", include_in_schema=False)
    def plotly_js() -> FileResponse:
        return FileResponse(PLOTLY_JS, media_type="text/javascript",
                            headers={"Cache-Control": "public, max-age=86400"})

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        return Response(status_code=204)

    @app.get("/", response_class=HTMLResponse)
    def index(request: Request) -> HTMLResponse:
        return page(request, "index.html", studies=studies.studies_overview(store))

    @app.get("/fragment/studies", response_class=HTMLResponse)
    def studies_fragment(request: Request) -> HTMLResponse:
        return page(request, "_studies.html", studies=studies.studies_overview(store))

    @app.get("/api/studies")
    def api_studies() -> list[dict[str, Any]]:
        return studies.studies_overview(store)

    @app.get("/study/{name:path}/fragment/summary", response_class=HTMLResponse)
    def summary_fragment(request: Request, name: str) -> HTMLResponse:
        st = get_study(name)
        return page(request, "_summary.html", study=st, s=studies.summary(store, st), formats=FORMATS)

    @app.get("/study/{name:path}/fragment/failures", response_class=HTMLResponse)
    def failures_fragment(request: Request, name: str) -> HTMLResponse:
        st = get_study(name)
        return page(request, "_failures.html", study=st, f=failures.failures(store, name))

    @app.get("/api/study/{name:path}/version")
    def api_version(name: str) -> dict[str, Any]:
        """The page polls this: its version (refetch on change), running trials, and whether a tuner is at work."""
        get_study(name)
        return data.liveness(store, name)

    @app.get("/api/study/{name:path}/data")
    def api_data(name: str) -> Response:
        return JSONResponse(plots.study_data(store, get_study(name)))

    @app.get("/api/study/{name:path}/history")
    def api_history(name: str) -> Response:
        return JSONResponse(history.history(store, get_study(name)))

    @app.get("/api/study/{name:path}/trials")
    def api_trials(request: Request, name: str, sort: str = "number", desc: bool = False, page: int = 0,
                   size: int = table.TABLE_PAGE, search: str = "", launched: bool = False) -> Response:
        """A page of the trials table: sorted, filtered (`f.<column>=<filter>`) and searched on the server."""
        filters = {k[2:]: v for k, v in request.query_params.items() if k.startswith("f.")}
        return JSONResponse(table.table_page(store, get_study(name), sort, desc, page, size, filters, search,
                                             launched))

    @app.get("/api/study/{name:path}/importance")
    def api_importance(name: str, evaluator: str = "default") -> dict[str, Any]:
        get_study(name)
        return importance.importance(storage_url, name, evaluator, importance.n_ok(store, name))

    @app.get("/study/{name:path}/trial/{number}", response_class=HTMLResponse)
    def trial_page(request: Request, name: str, number: int) -> HTMLResponse:
        st = get_study(name)
        row = get_trial(name, number)
        steps = store.steps(row.id)
        log, log_source = failures.log_tail(row)
        guessed, guessed_words = guessed_predictions(store, st, [row])
        return page(request, "trial.html", study=st, t=row, formats=FORMATS,
                    lengths_guessed=guessed_words if guessed else "",
                    profile=profiles.trial_profile(store, name, number),
                    timeline=Timeline.from_extra(row.extra), noise=noise_words(row),
                    forced=(row.extra or {}).get(FORCED), moments=memory_trace.per_moment(row),
                    rollout_wait=rollout_wait.words(row.extra, st.measure_step, rollout_wait.study_poll_s(st)),
                    layout=data.layout(row.params, data.reference(store, st)),
                    cls=data.failure_class(row.status, row.reason or ""), steps=steps,
                    step_metrics=list(dict.fromkeys(k for s in steps for k in s.metrics)),
                    log=log, log_source=log_source, capacity=data.capacity_gib(st),
                    step_error_percent=step_error_percent(bool((st.model or {}).get("num_experts"))),
                    keys={p: ", ".join(verl.PARAM_KEYS.get(p, ())) for p in row.params},
                    plot={"study": name, "number": number, "predicted_memory": row.predicted_memory,
                          "phase_timings": row.phase_timings, "predicted_phases": row.predicted_phases,
                          "steps": [{"step": s.step, **s.metrics} for s in steps],
                          "capacity_gib": data.capacity_gib(st), "peak_memory_gib": row.peak_memory_gib,
                          "peak_memory_per_gpu": row.peak_memory_per_gpu, "status": row.status,
                          "simulated": bool(row.simulated or st.simulated),
                          "version": data.version(store, name)})

    @app.get("/api/study/{name:path}/trial/{number}")
    def api_trial(name: str, number: int) -> Response:
        row = get_trial(name, number)
        doc = {c.name: getattr(row, c.name) for c in TrialRow.__table__.columns}
        doc["steps"] = [{"step": s.step, **s.metrics} for s in store.steps(row.id)]
        return JSONResponse(_json_safe(doc))

    @app.get("/api/study/{name:path}/trial/{number}/profile")
    def api_trial_profile(name: str, number: int) -> Response:
        get_trial(name, number)
        prof = profiles.trial_profile(store, name, number)
        if prof is None:
            raise HTTPException(404, f"trial {number} of {name!r} has no profile (autotune profile --study NAME "
                                "--trial N makes one)")
        return JSONResponse(_json_safe(prof))

    @app.get("/study/{name:path}/export/{fmt}")
    def export(name: str, fmt: str, trial: int | None = None) -> Response:
        from autotune.results.export import export_text

        get_study(name)
        if fmt not in FORMATS:
            raise HTTPException(404, f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
        row = get_trial(name, trial) if trial is not None else store.best(name)
        if row is None:
            raise HTTPException(404, f"study {name!r} has no trial that ran to its measured step yet")
        try:
            text = export_text(store, name, row, fmt)
        except ValueError as e:
            raise HTTPException(404, str(e)) from None
        fname = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{name}-trial{row.number}") + "." + EXPORT_EXT[fmt]
        return PlainTextResponse(text, media_type=EXPORT_MEDIA[fmt],
                                 headers={"Content-Disposition": f'attachment; filename="{fname}"'})

    async def note_body(request: Request) -> str:
        refused = write_refusal(request.headers, allowed_hosts)
        if refused:
            raise HTTPException(403, refused)
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            raise HTTPException(415, "send the note as JSON: {\"note\": \"...\"} with Content-Type application/json")
        too_big = f"a note holds at most {NOTE_MAX_CHARS} characters (the request body may be {NOTE_MAX_BYTES} bytes)"
        try:
            declared = int(request.headers.get("content-length", "0"))
        except ValueError:
            raise HTTPException(400, "bad Content-Length") from None
        if declared > NOTE_MAX_BYTES:
            raise HTTPException(413, too_big)
        raw = bytearray()
        async for chunk in request.stream():  # a chunked body has no Content-Length: counted as it comes
            raw += chunk
            if len(raw) > NOTE_MAX_BYTES:
                raise HTTPException(413, too_big)
        try:
            body = json.loads(raw)
        except ValueError:
            raise HTTPException(400, "the body is not valid JSON") from None
        note = body.get("note") if isinstance(body, dict) else None
        if not isinstance(note, str):
            raise HTTPException(400, "expected {\"note\": \"text\"}")
        if len(note) > NOTE_MAX_CHARS:
            raise HTTPException(413, f"a note holds at most {NOTE_MAX_CHARS} characters")
        return note

    @app.post("/api/study/{name:path}/trial/{number}/note")
    async def trial_note(request: Request, name: str, number: int) -> dict[str, Any]:
        note = await note_body(request)
        row = get_trial(name, number)
        store.set_trial_note(row.id, note)
        data.forget(store, name)
        return {"ok": True, "note": note}

    @app.post("/api/study/{name:path}/note")
    async def study_note(request: Request, name: str) -> dict[str, Any]:
        note = await note_body(request)
        get_study(name)
        store.set_study_note(name, note)
        return {"ok": True, "note": note}

    # Last: study names may hold "/", so this one matches whatever the routes above did not.
    @app.get("/study/{name:path}", response_class=HTMLResponse)
    def study_page(request: Request, name: str) -> HTMLResponse:
        st = get_study(name)
        return page(request, "study.html", study=st, s=studies.summary(store, st), formats=FORMATS)

    return app


def _json_safe(v: Any) -> Any:
    import datetime as dt
    import math

    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    if isinstance(v, dt.datetime):
        return v.isoformat()
    return v


def _safe_url(url: str) -> str:
    from autotune.store.store import safe_url

    return safe_url(url)

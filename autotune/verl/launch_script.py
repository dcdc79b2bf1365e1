"""A user's verl launch script (bash running `python3 -m verl.trainer.main_ppo KEY=VALUE ...`) as an autotune job.

The script is read, never run: variables it sets (`x=$((1024*2))`, `${VAR:-default}`, quoting, line continuations)
are expanded by a small reader of that bash subset; anything else it would need to run (command substitution, `if`,
loops, variables set nowhere) is reported and the override it feeds is left out, never guessed. Its overrides become
the job, its own layout the study's baseline trial, and `render_like` writes the same script back with only the
tuned keys changed (`autotune export --format sh --like SCRIPT`).
"""

from __future__ import annotations

import ast
import operator
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from autotune import verl

ENTRY_MODULE = "verl.trainer.main_ppo"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=")
_OVERRIDE = re.compile(r"^(\+{0,2}[A-Za-z_][\w.\-/@]*)=")
_SEPARATORS = (";", "&&", "||", "|", "&", "\n")


class ScriptError(ValueError):
    """A launch script autotune cannot use (no verl command, two of them, unreadable)."""


class _Unresolved(Exception):
    pass


@dataclass
class _Word:
    text: str  # as written
    start: int
    end: int


@dataclass(frozen=True)
class Override:
    key: str  # as written, with any + prefix
    raw: str  # the value after expansion, as Hydra would receive it
    word: tuple[int, int]  # span of the whole KEY=VALUE word in the script text

    @property
    def bare_key(self) -> str:
        return self.key.lstrip("+")


@dataclass
class LaunchScript:
    path: str
    text: str
    overrides: list[Override] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)  # --config-name=..., kept by the script, not by the job
    notes: list[str] = field(default_factory=list)  # what was not read, and why
    command_end: int = 0  # where new overrides are inserted
    passes_args: bool = False  # the command ends with "$@"

    # The job ------------------------------------------------------------------------------------------------
    def values(self) -> dict[str, Any]:
        return {o.key: parse_hydra_value(o.raw) for o in self.overrides}

    def job_mapping(self) -> dict[str, Any]:
        """The script's overrides as a job mapping (verl's defaults for shape keys it leaves out; no autotune
        defaults). `Job.from_launch_script` turns it into a Job."""
        mapping: dict[str, Any] = {}
        for key, value in self.values().items():
            bare = key.lstrip("+")
            if bare in _REF_LAYOUT_KEYS:
                continue  # the reference model follows the actor's (tuned) layout; see read_script's note
            mapping[key] = value
        for key, default in verl.VERL_JOB_DEFAULTS.items():
            if key not in mapping and "+" + key not in mapping:
                mapping[key] = default
        return mapping

    def report(self) -> str:
        lines = [f"{self.path}: {len(self.overrides)} verl overrides read"]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    # Writing it back ----------------------------------------------------------------------------------------
    def render_like(self, values: Mapping[str, Any], stock: Mapping[str, Any], header: str = "") -> str:
        """The script with the tuned keys (export.tuned_values: verl key -> value) changed, and added where the
        script leaves verl's default and the value differs from verl's stock one (`stock`: verl key -> value, a
        default Candidate's verl_overrides())."""
        tuned = dict(values)
        for key in _REF_LAYOUT_KEYS:  # explicit reference layout keys follow the actor's
            actor_key = key.replace(".ref.", ".actor.", 1)
            if actor_key in tuned:
                tuned[key] = tuned[actor_key]
        edits: list[tuple[int, int, str]] = []
        present = set()
        for o in self.overrides:
            if o.bare_key in tuned:
                present.add(o.bare_key)
                edits.append((o.word[0], o.word[1], shlex.quote(verl.override(o.key, tuned[o.bare_key]))))
        added = [verl.override(k, v) for k, v in tuned.items()
                 if k not in present and not k.startswith(_REF_PREFIX) and stock.get(k, object()) != v]
        if added:
            insert = "".join(f" \\\n    {shlex.quote(a)}" for a in added)
            edits.append((self.command_end, self.command_end, insert))
        text = self.text
        for start, end, new in sorted(edits, key=lambda e: e[0], reverse=True):
            text = text[:start] + new + text[end:]
        if header:
            lines = text.split("\n", 1)
            if lines[0].startswith("#!"):
                text = lines[0] + "\n" + header + ("\n" + lines[1] if len(lines) > 1 else "")
            else:
                text = header + "\n" + text
        return text


_REF_PREFIX = "actor_rollout_ref.ref.megatron."
_REF_LAYOUT_KEYS = tuple(
    _REF_PREFIX + k.rsplit(".", 1)[1] for p in ("tp", "pp", "vpp", "cp", "ep", "etp") for k in verl.keys_for(p)
)


def parse_hydra_value(raw: str) -> Any:
    """A Hydra override value as a Python value: 8 -> 8, 1e-6 -> 1e-06, True -> True, [a,b] -> list, null -> None."""
    text = raw.strip()
    if re.fullmatch(r"[+-]?\d+", text):
        return int(text)
    if re.fullmatch(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?", text):
        return float(text)
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if text.lower() in ("null", "none", "~"):
        return None
    if text.startswith("[") or (len(text) > 1 and text[0] == text[-1] and text[0] in "'\""):
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError:
            return text
    return text


def is_launch_script(path: Path) -> bool:
    if path.suffix in (".sh", ".bash"):
        return True
    try:
        head = path.read_text(errors="replace")[:4096]
    except OSError:
        return False
    return head.startswith("#!") and ENTRY_MODULE in path.read_text(errors="replace")


# Reading ---------------------------------------------------------------------------------------------------------
def read_script(path: str | Path, environ: Mapping[str, str] | None = None) -> LaunchScript:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ScriptError(f"cannot read launch script {p}: {e}") from None
    return parse_script(text, str(p), environ)


def parse_script(text: str, path: str = "<script>", environ: Mapping[str, str] | None = None) -> LaunchScript:
    env = dict(os.environ if environ is None else environ)
    script = LaunchScript(path, text)
    variables: dict[str, str] = {}
    commands = 0
    for stmt in _statements(text):
        words = stmt
        line = text.count("\n", 0, words[0].start) + 1
        shown = text[words[0].start:words[-1].end].replace("\\\n", " ")
        shown = re.sub(r"\s+", " ", shown)[:120]
        first = words[0].text
        if first in ("if", "for", "while", "until", "case", "function", "select") or first.endswith("()"):
            script.notes.append(f"line {line}: `{shown}`: shell control flow is not read; "
                                "variables it would set are unknown")
            continue
        head = [w for w in words]
        if head[0].text == "export" or head[0].text == "declare" or head[0].text == "local":
            head = head[1:]
        if head and all(_ASSIGN.match(w.text) for w in head):
            for w in head:
                name = _ASSIGN.match(w.text).group(1)  # type: ignore[union-attr]
                try:
                    variables[name] = _expand(w.text[len(name) + 1:], variables, env, script, line)
                except _Unresolved as e:
                    variables.pop(name, None)
                    script.notes.append(f"line {line}: {name}: {e}; left unset")
            continue
        idx = next((i for i, w in enumerate(words) if w.text == ENTRY_MODULE), None)
        if idx is None or idx == 0 or words[idx - 1].text != "-m":
            if first not in ("set", "echo", "cd", "ray", "nvidia-smi", "ulimit", "source", ".", "mkdir", "unset"):
                script.notes.append(f"line {line}: `{shown}` is not read (only variable assignments and the "
                                    "verl command are)")
            continue
        commands += 1
        if commands > 1:
            raise ScriptError(f"{path}: runs {ENTRY_MODULE} more than once (line {line}); autotune cannot tell "
                              "which run to tune: keep one command in the script")
        _read_command(words[idx + 1:], variables, env, script, line)
        script.command_end = script.overrides[-1].word[1] if script.overrides else words[idx].end
    if commands == 0:
        raise ScriptError(f"{path}: no `python -m {ENTRY_MODULE}` command found; a launch script runs verl's "
                          "trainer with Hydra overrides (or give a YAML job file)")
    ref = [o.key for o in script.overrides if o.bare_key in _REF_LAYOUT_KEYS]
    if ref:
        script.notes.append(f"{', '.join(ref)}: the reference model's layout is left to follow the actor's tuned "
                            "layout (verl's default); an exported script sets them to the actor's values")
    return script


def _read_command(words: list[_Word], variables: dict[str, str], env: dict[str, str], script: LaunchScript,
                  line: int) -> None:
    for w in words:
        if w.text in ('"$@"', "$@", '"${@}"', "${@}", '"$*"', "$*"):
            script.passes_args = True
            continue
        if w.text.startswith(("1>", "2>", ">", "<", "&>")):
            continue
        try:
            value = _expand(w.text, variables, env, script, line)
        except _Unresolved as e:
            script.notes.append(f"line {line}: `{w.text}`: {e}; this override is left out")
            continue
        if value.startswith("-"):
            script.flags.append(value)
            script.notes.append(f"`{value}` kept as a flag of the script (autotune launches verl with "
                                "`model_engine=megatron` on verl's default config)")
            continue
        m = _OVERRIDE.match(value)
        if not m:
            script.notes.append(f"line {line}: `{w.text}` is not a KEY=VALUE override; ignored")
            continue
        key = m.group(1)
        script.overrides.append(Override(key, value[m.end():], (w.start, w.end)))


# A small lexer: words with spans, statement separators, quotes, comments, line continuations. -------------------
def _statements(text: str) -> list[list[_Word]]:
    stmts: list[list[_Word]] = []
    cur: list[_Word] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n and text[i + 1] == "\n":
            i += 2
            continue
        if c in " \t\r":
            i += 1
            continue
        if c == "#":
            while i < n and text[i] != "\n":
                i += 1
            continue
        if c in "\n;&|":
            if cur:
                stmts.append(cur)
                cur = []
            i += 2 if text[i:i + 2] in ("&&", "||") else 1
            continue
        start = i
        depth = 0
        while i < n:
            c = text[i]
            if c == "\\" and i + 1 < n:
                if text[i + 1] == "\n" and depth == 0:
                    break
                i += 2
                continue
            if c == "'" and depth == 0:
                j = text.find("'", i + 1)
                i = n if j < 0 else j + 1
                continue
            if c == '"':
                i = _skip_double(text, i)
                continue
            if text.startswith("$(", i) or text.startswith("${", i):
                depth += 1
                i += 2
                continue
            if depth and c in "({":
                depth += 1
            elif depth and c in ")}":
                depth -= 1
            elif c == "&" and i > start and text[i - 1] in "<>":
                pass  # 2>&1
            elif depth == 0 and (c in " \t\r\n;|&" or c == "#" and i == start):
                break
            i += 1
        cur.append(_Word(text[start:i], start, i))
    if cur:
        stmts.append(cur)
    return stmts


def _skip_double(text: str, i: int) -> int:
    i += 1
    while i < len(text) and text[i] != '"':
        i += 2 if text[i] == "\\" else 1
    return i + 1


def _expand(word: str, variables: dict[str, str], env: dict[str, str], script: LaunchScript, line: int) -> str:
    """One shell word to its value: quotes removed, $VAR / ${VAR:-d} / $((expr)) expanded."""
    out: list[str] = []
    i, n = 0, len(word)
    quoted = False
    while i < n:
        c = word[i]
        if c == "'" and not quoted:
            j = word.find("'", i + 1)
            if j < 0:
                raise _Unresolved("unterminated single quote")
            out.append(word[i + 1:j])
            i = j + 1
        elif c == '"':
            quoted = not quoted
            i += 1
        elif c == "\\" and i + 1 < n:
            nxt = word[i + 1]
            if not quoted or nxt in '$`"\\':
                out.append(nxt)
                i += 2
            else:
                out.append(c)
                i += 1
        elif c == "`":
            raise _Unresolved("command substitution (`...`) is not run")
        elif c == "$":
            val, i = _dollar(word, i, variables, env, script, line)
            out.append(val)
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _lookup(name: str, variables: dict[str, str], env: dict[str, str], script: LaunchScript, line: int) -> str | None:
    if name in variables:
        return variables[name]
    if name in env:
        note = f"${name} taken from this shell's environment ({env[name]!r})"
        if note not in script.notes:
            script.notes.append(note)
        return env[name]
    return None


def _dollar(word: str, i: int, variables: dict[str, str], env: dict[str, str], script: LaunchScript,
            line: int) -> tuple[str, int]:
    if word.startswith("$((", i):
        end = _match(word, i + 1)
        expr = word[i + 3:end - 1]
        return str(_arith(expr, variables, env, script, line)), end + 1
    if word.startswith("$(", i):
        raise _Unresolved("command substitution $(...) is not run")
    if word.startswith("${", i):
        end = word.find("}", i)
        if end < 0:
            raise _Unresolved("unterminated ${")
        body = word[i + 2:end]
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*|\d+)(?:(:?[-=])(.*))?", body, re.S)
        if not m:
            raise _Unresolved(f"${{{body}}} is not a form autotune reads")
        name, op, default = m.group(1), m.group(2), m.group(3)
        value = _lookup(name, variables, env, script, line)
        if op is not None and (value is None or (op.startswith(":") and value == "")):
            value = _expand(default, variables, env, script, line)
            if op.endswith("="):
                variables[name] = value
        if value is None:
            raise _Unresolved(f"${{{name}}} is set nowhere in the script or the environment")
        return value, end + 1
    m = _NAME.match(word, i + 1) or re.compile(r"\d").match(word, i + 1)
    if not m:
        return "$", i + 1
    value = _lookup(m.group(0), variables, env, script, line)
    if value is None:
        raise _Unresolved(f"${m.group(0)} is set nowhere in the script or the environment")
    return value, m.end()


def _match(word: str, i: int) -> int:
    """Index of the ')' closing the '(' at i."""
    depth = 0
    for j in range(i, len(word)):
        if word[j] == "(":
            depth += 1
        elif word[j] == ")":
            depth -= 1
            if depth == 0:
                return j
    raise _Unresolved("unbalanced $((...))")


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod, ast.Pow: operator.pow}


def _arith(expr: str, variables: dict[str, str], env: dict[str, str], script: LaunchScript, line: int) -> int:
    """bash integer arithmetic: + - * / % ** and parentheses over integers and variables."""
    def sub(m: re.Match[str]) -> str:
        value = _lookup(m.group(1), variables, env, script, line)
        if value is None:
            raise _Unresolved(f"${m.group(1)} in $(({expr})) is set nowhere")
        if not re.fullmatch(r"\s*-?\d+\s*", value):
            raise _Unresolved(f"${m.group(1)}={value!r} is not an integer in $(({expr}))")
        return value.strip()

    text = re.sub(r"\$?\{?([A-Za-z_][A-Za-z0-9_]*)\}?", sub, expr).replace("/", "//")

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        raise _Unresolved(f"$(({expr})) uses arithmetic autotune does not read")

    try:
        return ev(ast.parse(text.replace("////", "//"), mode="eval"))
    except SyntaxError:
        raise _Unresolved(f"$(({expr})) is not integer arithmetic autotune reads") from None

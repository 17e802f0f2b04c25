"""Which commands of a session reached for git history or the network, where a gold fix can be found.

Why: agents have read the fix out of the image's repository (``git log --all``, then ``git show`` of a later commit:
SWE-bench issue 465, mini-swe-agent issue 787) or fetched it from the project's code host. INIT strips the history
(`harness.history`), but a corpus consumer still wants to know which sessions tried, so each row carries
``lookups``: ``[{"kind": "history" | "network", "rule": ..., "command": ...}]``, at most `MAX_LOOKUPS`, each command
cut to `COMMAND_CHARS`. It is a flag for filtering, not a verdict.

The input is every tool call the model made (each capture record's answer, in call order), whatever the harness:
a call whose arguments hold a ``command``/``cmd`` (a string, or an argv list; ``bash -c X`` counts as X) is a shell
command (Claude Code's and Pi's Bash, Codex's exec_command and shell, Qwen Code's and Gemini CLI's
run_shell_command), Codex's ``write_stdin`` ``chars`` too; a web tool (WebFetch, WebSearch, web_fetch,
google_web_search) is a network lookup. A command is split into simple commands (shlex with ``; && || | & ( ) $(
)`` and backticks as separators, heredoc bodies dropped: they are file contents), leading ``VAR=x``, ``sudo``,
``env``, ``timeout N``, ``xargs`` and git's global options skipped. The rules:

- history: ``git log|show|shortlog|rev-list|whatchanged`` with ``--all``, ``--branches``, ``--remotes``,
  ``--tags``, ``--glob``, ``--reflog``, ``-g``; any ``git reflog``, ``git fsck``, ``git stash list|show``,
  ``git for-each-ref``, ``git show-ref``, ``git branch -a|-r``, ``git tag`` listing, ``git cat-file
  --batch-all-objects``; and ``git show|log|diff|checkout|switch|restore|reset|cherry-pick|merge|rebase|cat-file|
  ls-tree|archive|blame|format-patch|rev-parse|merge-base`` of a revision other than HEAD (``HEAD~2``, ``@``) and
  the base commit: a
  commit id (an ancestor's too: the text cannot tell), ``@{...}`` (reflog, upstream), ``ORIG_HEAD``/``FETCH_HEAD``,
  ``stash``, ``refs/...``, ``origin/...``, ``upstream/...``, a version tag (``v1.2``, ``3.0.1``).
- network: ``git fetch|pull|clone|ls-remote``, ``git remote update``; ``curl``, ``wget``, ``http``, ``aria2c``,
  ``lynx``, ``w3m`` unless every address they name is local; ``gh``, ``hub``, ``glab``; ``pip download``; ``hg
  clone``, ``svn checkout|export``; a URL of a code host (GitHub, GitLab, Bitbucket, ...) anywhere in the command.

Fine, and never flagged: ``git log -5``, ``git diff``, ``git status``, ``git show HEAD``, ``git stash`` and
``pop`` of the agent's own stash, ``git checkout -- file``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from polar_cli.capture import CaptureRecord
from polar_cli.trajectory.messages import response_message

MAX_LOOKUPS = 20
COMMAND_CHARS = 500

SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh"})
WEB_TOOLS = frozenset({"webfetch", "websearch", "googlewebsearch"})
WRAPPERS = frozenset({"sudo", "env", "command", "exec", "nohup", "time", "nice", "xargs", "builtin"})
NETWORK_PROGRAMS = frozenset({"curl", "wget", "http", "https", "httpie", "aria2c", "lynx", "w3m", "links"})
HOST_CLIS = frozenset({"gh", "hub", "glab"})
# git's options that come before the subcommand and take a value as the next word
GIT_GLOBAL_VALUED = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path"})
REF_SETS = ("--all", "--branches", "--remotes", "--tags", "--glob", "--reflog", "-g", "--walk-reflogs")
LOG_LIKE = frozenset({"log", "show", "shortlog", "rev-list", "whatchanged"})
REVISION_TAKING = LOG_LIKE | frozenset(
    {"diff", "checkout", "switch", "restore", "reset", "cherry-pick", "merge", "rebase", "cat-file", "ls-tree",
     "archive", "blame", "format-patch", "rev-parse", "merge-base"}
)  # fmt: skip
# options of those subcommands whose value is the next word and never a revision
VALUED = frozenset(
    {"-n", "--max-count", "-S", "-G", "--grep", "--author", "--committer", "--since", "--until", "--after",
     "--before", "--format", "--pretty", "-L", "-m", "-b", "-B", "-c", "-U", "--unified", "-O", "--date", "-o",
     "--output", "--prefix", "--skip"}
)  # fmt: skip
GIT_NETWORK = frozenset({"fetch", "pull", "clone", "ls-remote"})
CODE_HOSTS = re.compile(
    r"(?:https?://|git://|ssh://|git@)(?:[\w.-]+\.)?"
    r"(github\.com|githubusercontent\.com|gitlab\.com|bitbucket\.org|codeberg\.org|sourceforge\.net|"
    r"googlesource\.com|kernel\.org|gitee\.com|sr\.ht)\b",
    re.IGNORECASE,
)
LOCAL_HOSTS = re.compile(r"^(?:\w+://)?(?:localhost|127\.\d+\.\d+\.\d+|0\.0\.0\.0|\[::1\])(?:[:/]|$)")
HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][\w.-]*)\1[^\n]*\n")
HEAD_LIKE = re.compile(r"^(?:HEAD|@)?(?:[~^]\d*)*$")
COMMIT_ID = re.compile(r"^[0-9a-fA-F]{7,40}$")
VERSION_TAG = re.compile(r"^v?\d+(?:\.\d+)+(?:[.+_-]?[A-Za-z0-9]+)*$")
NAMED_REFS = ("refs/", "origin/", "upstream/", "remotes/")
PSEUDO_REFS = frozenset({"ORIG_HEAD", "FETCH_HEAD", "MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD", "stash"})
SEPARATORS = "();<>|&\n`"

Lookup = dict[str, str]


def find_lookups(records: Iterable[CaptureRecord], base_commit: str = "") -> list[Lookup]:
    """The session's history and network lookups, in call order, deduplicated and bounded."""
    found: list[Lookup] = []
    for record in sorted(records, key=lambda r: r.seq):
        message = response_message(record.response)
        for call in message["tool_calls"] if message is not None else ():
            function = call["function"]
            for lookup in call_lookups(function["name"], function["arguments"], base_commit):
                if lookup not in found:
                    found.append(lookup)
                if len(found) >= MAX_LOOKUPS:
                    return found
    return found


def call_lookups(name: str, arguments: str, base_commit: str = "") -> list[Lookup]:
    """The lookups of one tool call (``arguments`` is its JSON string, as in OpenAI chat)."""
    try:
        args = orjson.loads(arguments) if arguments else {}
    except orjson.JSONDecodeError:
        return []
    if not isinstance(args, Mapping):
        return []
    if name.replace("_", "").lower() in WEB_TOOLS:
        return [_lookup("network", name, f"{name} {orjson.dumps(args).decode()}")]
    command = command_of(name, args)
    if command is None:
        return []
    return [_lookup(kind, rule, command) for kind, rule in command_lookups(command, base_commit)]


def command_of(name: str, args: Mapping[str, Any]) -> str | None:
    """The shell command a tool call runs: a ``command``/``cmd`` string or argv, or ``write_stdin``'s ``chars``."""
    value = args.get("chars") if name == "write_stdin" else args.get("command", args.get("cmd"))
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        argv: list[str] = value
        if len(argv) >= 3 and argv[0].rsplit("/", 1)[-1] in SHELLS and argv[1] in ("-c", "-lc", "-cl"):
            return argv[2]
        return shlex.join(argv)
    return None


def command_lookups(command: str, base_commit: str = "") -> list[tuple[str, str]]:
    """(kind, rule) for each rule the shell command breaks, at most one per kind."""
    hits: dict[str, str] = {}
    commands = simple_commands(drop_heredocs(command))
    for words in commands:
        for kind, rule in _word_rules(words, base_commit):
            hits.setdefault(kind, rule)
    # in the words, not the text: a URL in a comment or a heredoc fetches nothing
    host = CODE_HOSTS.search("\n".join(" ".join(words) for words in commands))
    if host is not None:
        hits.setdefault("network", f"url {host.group(1).lower()}")
    return sorted(hits.items())


def drop_heredocs(command: str) -> str:
    """The command without its heredocs' bodies (file contents, not commands)."""
    out: list[str] = []
    pos = 0
    for match in HEREDOC.finditer(command):
        if match.start() < pos:
            continue
        out.append(command[pos : match.end()])
        end = re.compile(rf"^\s*{re.escape(match.group(2))}\s*$", re.MULTILINE).search(command, match.end())
        pos = end.end() if end is not None else len(command)
    out.append(command[pos:])
    return "".join(out)


def simple_commands(text: str) -> list[list[str]]:
    """The words of each simple command in ``text`` (a split that fails on bad quoting falls back to whitespace)."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=SEPARATORS)
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:
        tokens = re.split(r"\s+|(?=[;&|()`\n])|(?<=[;&|()`\n])", text)
    commands: list[list[str]] = [[]]
    for token in tokens:
        if not token:
            continue
        if all(c in SEPARATORS for c in token):
            commands.append([])
        else:
            commands[-1].append(token.removeprefix("$"))
    return [c for c in (_unwrap(words) for words in commands) if c]


def _unwrap(words: list[str]) -> list[str]:
    """Drop leading assignments and wrappers (``sudo``, ``env -i``, ``timeout 60``, ``xargs -n1``)."""
    i = 0
    while i < len(words):
        word = words[i]
        if i > 0 and word in ("-u", "-g"):  # sudo -u USER, env -u VAR
            i += 2
        elif not word or word in WRAPPERS or re.match(r"^[A-Za-z_]\w*=", word) or (i > 0 and word.startswith("-")):
            i += 1
        elif word == "timeout":
            i += 1
            while i < len(words) and (words[i].startswith("-") or re.match(r"^\d+[smhd]?$", words[i])):
                i += 1
        else:
            break
    return words[i:]


def _word_rules(words: Sequence[str], base_commit: str) -> list[tuple[str, str]]:
    program = words[0].rsplit("/", 1)[-1]
    rest = list(words[1:])
    if program in SHELLS and len(rest) >= 2 and rest[0] in ("-c", "-lc", "-cl"):
        return command_lookups(rest[1], base_commit)
    if program == "git":
        return _git_rules(rest, base_commit)
    if program in NETWORK_PROGRAMS:
        targets = [w for w in rest if not w.startswith("-") and ("." in w or "://" in w or "localhost" in w)]
        return [("network", program)] if any(not LOCAL_HOSTS.match(t) for t in targets) else []
    if program in HOST_CLIS:
        return [("network", program)]
    if program in ("pip", "pip3") or (re.match(r"^python[\d.]*$", program) and rest[:2] == ["-m", "pip"]):
        sub = rest[2:] if program.startswith("python") else rest
        return [("network", "pip download")] if sub[:1] == ["download"] else []
    if (program, rest[:1]) in (("hg", ["clone"]), ("svn", ["checkout"]), ("svn", ["co"]), ("svn", ["export"])):
        return [("network", f"{program} {rest[0]}")]
    return []


def _git_rules(args: list[str], base_commit: str) -> list[tuple[str, str]]:
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in GIT_GLOBAL_VALUED else 1
    if i >= len(args):
        return []
    sub, rest = args[i], args[i + 1 :]
    if sub in GIT_NETWORK or (sub == "remote" and rest[:1] == ["update"]):
        return [("network", f"git {sub}")]
    rule = _git_history_rule(sub, rest, base_commit)
    return [("history", rule)] if rule is not None else []


def _git_history_rule(sub: str, rest: list[str], base_commit: str) -> str | None:
    options = [w for w in rest if w.startswith("-")]
    if sub in ("reflog", "fsck", "for-each-ref", "show-ref"):
        return f"git {sub}"
    if sub == "stash" and rest[:1] in (["list"], ["show"]):
        return f"git stash {rest[0]}"
    if sub == "branch" and any(o in ("-a", "-r", "--all", "--remotes") for o in options):
        return "git branch " + next(o for o in options if o in ("-a", "-r", "--all", "--remotes"))
    if sub == "tag" and (not rest or any(o in ("-l", "--list", "--contains", "--merged") for o in options)):
        return "git tag"
    if sub == "cat-file" and "--batch-all-objects" in options:
        return "git cat-file --batch-all-objects"
    if sub in LOG_LIKE:
        ref_set = next((o for o in options if o.split("=", 1)[0] in REF_SETS), None)
        if ref_set is not None:
            return f"git {sub} {ref_set.split('=', 1)[0]}"
    if sub in REVISION_TAKING:
        other = next((r for r in revisions(rest) if is_other_revision(r, base_commit)), None)
        if other is not None:
            return f"git {sub} {other}"
    return None


def revisions(args: Sequence[str]) -> list[str]:
    """The words that may name a revision: positional words before ``--``, and ``--source=``/``-s`` values."""
    found: list[str] = []
    skip = False
    for i, word in enumerate(args):
        if skip:
            skip = False
            continue
        if word == "--":
            break
        if word.startswith("--source="):
            found.append(word.split("=", 1)[1])
        elif word in ("-s", "--source") and i + 1 < len(args):
            found.append(args[i + 1])
            skip = True
        elif word in VALUED:
            skip = True
        elif not word.startswith("-"):
            found.append(word)
    return found


def is_other_revision(word: str, base_commit: str = "") -> bool:
    """Whether ``word`` names a revision other than HEAD and the base commit (see the module docstring)."""
    if "@{" in word:
        return True
    rev = word.lstrip("^").split(":", 1)[0]
    return any(_other_side(side, base_commit) for side in re.split(r"\.\.\.?", rev))


def _other_side(side: str, base_commit: str) -> bool:
    name = re.sub(r"(?:[~^]\d*)+$", "", side)
    if not name or HEAD_LIKE.match(side):
        return False
    if COMMIT_ID.match(name):
        return not (base_commit and base_commit.lower().startswith(name.lower()))
    return name in PSEUDO_REFS or name.startswith(NAMED_REFS) or bool(VERSION_TAG.match(name))


def _lookup(kind: str, rule: str, command: str) -> Lookup:
    cut = command if len(command) <= COMMAND_CHARS else command[: COMMAND_CHARS - 3] + "..."
    return {"kind": kind, "rule": rule, "command": cut}

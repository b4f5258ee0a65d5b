"""Credentials removed by their value, wherever they appear.

Bundles and Runs get attached to bug reports. Environment variables with secret-looking names are
redacted by name when a bundle is captured; this module catches what names miss: a password inside
``PIP_INDEX_URL``, a token passed on a command line, an API key pasted into a launcher's arguments.
It knows three kinds of credential:

- URL userinfo (``scheme://user:password@host``): the userinfo becomes ``***``, the rest of the URL
  stays, so ``https://***@pypi.example.com/simple`` still says which index was used;
- ``key=value`` pairs and command-line options whose key names a secret (``password=``,
  ``AccountKey=``, ``--api-key VALUE``, ``?token=``): the key stays, the value goes;
- token shapes that identify themselves (GitHub ``ghp_``/``github_pat_``, Hugging Face ``hf_``,
  OpenAI/Anthropic ``sk-``, Slack ``xox?-``, AWS access key ids, GitLab, Google, npm, PyPI,
  Stripe, JWTs, PEM private keys) keep their prefix, so the report still says which kind leaked;
- long high-entropy strings that mix upper case, lower case and digits (random API keys without
  a prefix, AWS secret keys). Hex strings are spared: they are hashes, git commits and device ids
  far more often than secrets in what perfstack records, and a secret in hex behind a secret-looking
  name is caught by the name.

Matching is by regular expressions rather than a scanner library: detect-secrets, measured on the
same planted secrets and benign strings (benchmarks/redaction_coverage.py), finds lines that hold a
secret but does not say where it starts and ends inside a long value, and flags hashes and paths.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

MASK = "***"
NOT_KEPT = "<not-kept>"  # a value a capture did not keep (host.capture.Keep): one token, so tables still parse

# scheme://userinfo@ — userinfo has no '/', '@' or whitespace (RFC 3986); '@' inside a password must be
# percent-encoded, so the last '@' before the host ends it.
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]{1,20}://)([^/\s@\x00\"'<>]+)@(?=[^\s@/\x00]+)")

# A key names a secret when it ends with one of these words (HF_TOKEN, AccountKey, --api-key), not
# when it merely contains one (TOKENIZERS_PARALLELISM, --token-limit).
_SECRET_KEY = (r"(?:[\w.-]*?(?:passw(?:or)?d|passphrase|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|"
               r"private[_-]?key(?:[_-]?id)?|auth|authorization|credentials?|sharedaccesskey|accountkey|sig))")
# key=value and key: value, in URLs' queries, connection strings, config-like text and JSON ("key": "value")
_KEY_VALUE = re.compile(rf"(?i)(?<![\w-])({_SECRET_KEY})([\"']?\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|[^\s;&,\x00\"'<>]+)")
# --password VALUE on a command line (arguments separated by spaces or, in /proc/*/cmdline, NULs)
_OPTION_VALUE = re.compile(rf"(?i)(?<![\w-])(--?{_SECRET_KEY})([ \x00]+)(?!-)([^\s\x00]+)")

_TOKENS = [re.compile(p) for p in (
    r"\b(gh[pousr]_)[A-Za-z0-9]{30,}",  # GitHub classic tokens
    r"\b(github_pat_)[A-Za-z0-9_]{30,}",  # GitHub fine-grained
    r"\b(glpat-)[A-Za-z0-9_-]{20,}",  # GitLab
    r"\b(hf_)[A-Za-z0-9]{30,}",  # Hugging Face
    r"(?<![\w-])(sk-(?:ant-|proj-|svcacct-|admin-)?)[A-Za-z0-9_-]{20,}",  # OpenAI, Anthropic
    r"\b([sr]k_(?:live|test)_)[A-Za-z0-9]{16,}",  # Stripe
    r"\b(xox[abposr]-)[A-Za-z0-9-]{10,}",  # Slack
    r"\b(xapp-)[A-Za-z0-9-]{10,}",  # Slack app-level
    r"\b((?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA))[A-Z0-9]{16,24}\b",  # AWS access key ids (20; some tools 21+)
    r"(hooks\.slack\.com/(?:services|workflows|triggers)/)[A-Za-z0-9/_-]+",  # Slack webhooks: the path is the key
    r"((?:discord|discordapp)\.com/api/webhooks/)[A-Za-z0-9/_-]+",  # Discord webhooks
    r"\b(AIza)[A-Za-z0-9_-]{35}",  # Google API keys
    r"\b(npm_)[A-Za-z0-9]{36}",  # npm
    r"\b(pypi-)[A-Za-z0-9_-]{50,}",  # PyPI upload tokens
    r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/-]{16,}=*",  # HTTP Authorization headers
    r"\b(eyJ)[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",  # JWT (header.payload.signature)
)]
_PEM = re.compile(r"(-----BEGIN [A-Z ]*PRIVATE KEY-----)[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|\Z)")

# Candidates for the entropy test: runs of base64/base62 characters.
# Candidates for the entropy test: runs of base64/base62 characters ('=' only as padding, so that
# key=value pairs are two runs).
_RUN = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{32,}={0,2}(?![A-Za-z0-9+/=_-])")
MIN_ENTROPY_BITS = 4.2  # per character; random base62 of 32-64 characters scores 4.6-5.5


def entropy(s: str) -> float:
    """Shannon entropy in bits per character."""
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in Counter(s).values()) if n else 0.0


def looks_random(s: str) -> bool:
    """A long string of upper case, lower case and digits with the entropy of random data; not hex,
    not a path (paths are runs of words between slashes), not a UUID, not a name made of short parts
    (Org/Meta-Llama-3-70B-Instruct-AWQ: a random key's rare '-' and '_' leave long pieces)."""
    core = s.strip("=")
    if len(core) < 32 or re.fullmatch(r"[0-9a-fA-F-]+", core):
        return False
    if not (re.search(r"[a-z]", core) and re.search(r"[A-Z]", core) and re.search(r"\d", core)):
        return False
    parts = re.split(r"[-_./]", core)
    if len(parts) >= 3 and max(map(len, parts)) <= 12:
        return False
    # Paths: absolute, or with a lower-case word between slashes (snapshots/, lib/); base64 keys
    # have slashes too but no such words.
    if core.startswith("/") or any(re.fullmatch(r"[a-z]{3,}|[a-z0-9._-]*[a-z]{3,}[a-z0-9._-]*", p)
                                   for p in core.split("/")[:-1]):
        return False
    return entropy(core) >= MIN_ENTROPY_BITS


def text(s: str) -> str:
    """``s`` with every credential this module recognizes replaced by ``***`` (prefixes kept)."""
    if not s:
        return s
    s = _PEM.sub(lambda m: f"{m.group(1)}{MASK}{m.group(2)}", s)
    s = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{MASK}@", s)
    for pattern in _TOKENS:
        s = pattern.sub(lambda m: f"{m.group(1)}{MASK}", s)
    s = _KEY_VALUE.sub(lambda m: m.group(0) if _masked(m.group(3)) else f"{m.group(1)}{m.group(2)}{_quoted(m.group(3))}", s)
    s = _OPTION_VALUE.sub(lambda m: m.group(0) if _masked(m.group(3)) else f"{m.group(1)}{m.group(2)}{MASK}", s)
    return _RUN.sub(_run, s)


def _quoted(value: str) -> str:
    """MASK in the quotes the value had (a JSON or shell string stays one)."""
    q = value[:1] if value[:1] in "\"'" and value[-1:] == value[:1] and len(value) > 1 else ""
    return f"{q}{MASK}{q}"


def _run(m: re.Match[str]) -> str:
    """A run of key-like characters: masked whole when it looks random; else each of its '/' parts that
    does (a key file's name under a directory of words, /etc/app/keys/Zq7X...)."""
    run = m.group(0)
    if looks_random(run):
        return MASK
    if "/" not in run:
        return run
    return "/".join(MASK if len(p) >= 32 and looks_random(p) else p for p in run.split("/"))


# Names of variables and keys that hold secrets: a secret word as a whole part of the name (HF_TOKEN,
# AWS_SECRET_ACCESS_KEY, DB_PASSWORD), not inside another word (TOKENIZERS_PARALLELISM, NCCL_IB_PKEY).
SECRET_NAME = re.compile(r"(?i)(?:^|[_.-])(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD|PASS|PWD|PASSPHRASE|CREDENTIALS?|AUTH|"
                         r"COOKIE|SESSION|APIKEY|PRIVATE|SIGNATURE|SAS|DSN|WEBHOOK)(?:$|[_.-])")


def secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def _masked(value: str) -> bool:
    """Already redacted (by an earlier pattern) or a placeholder, not a value to mask again."""
    v = value.strip("\"'")
    return v.endswith(MASK) or v in ("", "REDACTED") or v.startswith("$")


def value(v: Any) -> Any:
    """``text`` applied to every string inside a JSON-like value (dict keys too)."""
    if isinstance(v, str):
        return text(v)
    if isinstance(v, dict):
        return {text(k) if isinstance(k, str) else k: value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(value(x) for x in v)
    return v


def scrub_run(run: Any) -> Any:
    """Redact a Run in place, every section of every kind: meta, facts, findings, checks, measurements,
    and the profile, estimate, load-test, fleet and try sections (a load test keeps text a server sent; a
    fleet, text its nodes sent). The Run goes through its own JSON form, so that no field is left out
    by a list of fields here, and comes back through its loader's checks."""
    d = run.to_dict()
    clean = value(d)
    if clean != d:
        fresh = type(run).from_dict(clean)
        for k, v in vars(fresh).items():
            setattr(run, k, v)
    return run

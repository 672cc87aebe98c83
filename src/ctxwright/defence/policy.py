"""The confirmation gate's allowlists, and which argument of a call is which kind of target.

Why allowlists: the book's rule is that what data cannot be trusted to do, code must stop --
a tool that writes files, sends mail or posts to a host acts on the world, and whether the
destination is one the user already agreed to is a question code can answer before the call
runs, whatever the model was talked into. The user names the destinations once: folders
(the workspace is always one), e-mail domains or addresses, hosts or URL prefixes.

Which argument is which (:func:`targets_of`), in this order -- the first rule that applies wins:

1. the JSON Schema ``format`` of the parameter: ``email``/``idn-email`` is an e-mail address,
   ``uri``/``iri``/``uri-reference``/``url`` a URL, ``hostname``/``idn-hostname``/``ipv4``/
   ``ipv6`` a host;
2. the value's shape: a string that is exactly one e-mail address is an address wherever it
   sits; a string starting ``http://`` or ``https://`` without spaces is a URL;
3. the parameter's name, split into words (``recipient_email``, ``filePath``): ``url``, ``uri``,
   ``link``, ``href``, ``endpoint``, ``webhook`` name a URL; ``host``, ``hostname``, ``domain``,
   ``server`` a host; ``path``, ``file``, ``filename``, ``filepath``, ``dir``, ``directory``,
   ``folder``, ``dest``, ``destination`` a path; ``to``, ``cc``, ``bcc``, ``recipient(s)``,
   ``receiver``, ``email``, ``mail``, ``address``, ``user``, ``username``, ``participant(s)``,
   ``attendee(s)``, ``invitee(s)``, ``channel`` a recipient (a name, an account, an IBAN --
   no allowlist covers it). A name that also holds ``id``, ``ids``, ``uuid`` or ``key``
   (``file_id``) names a reference, not a target;
4. otherwise a string starting ``/`` or ``~/`` without whitespace is a path.

Lists are walked item by item under their parameter's name (``to[0]``), objects key by key
(``message.to``). Whatever none of these rules classify is not a target (a subject, a body):
:mod:`ctxwright.defence.provenance` still looks for addresses, URLs and numbers inside it.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from ctxwright.defence.hosts import canonical_host
from ctxwright.errors import GateRuleError

__all__ = [
    "RULE_KEYS",
    "GatePolicy",
    "Target",
    "TargetKind",
    "email_parts",
    "host_of",
    "leaves",
    "name_words",
    "targets_of",
]

TargetKind = Literal["email", "url", "host", "path", "recipient"]

#: The keys a rules file may hold (``--gate-rules FILE``).
RULE_KEYS = ("paths", "domains", "hosts")

_EMAIL = re.compile(r"^[\w.!#$%&'*+/=?^`{|}~-]+@[\w-]+(?:\.[\w-]+)+$")
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_URL_WORDS = frozenset({"url", "uri", "link", "href", "endpoint", "webhook", "urls", "links"})
_HOST_WORDS = frozenset({"host", "hostname", "domain", "server"})
_PATH_WORDS = frozenset(
    {"path", "file", "filename", "filepath", "dir", "directory", "folder", "dest", "destination", "paths", "files"}
)
_RECIPIENT_WORDS = frozenset(
    {
        "to",
        "cc",
        "bcc",
        "recipient",
        "recipients",
        "receiver",
        "email",
        "emails",
        "mail",
        "address",
        "addresses",
        "user",
        "username",
        "participant",
        "participants",
        "attendee",
        "attendees",
        "invitee",
        "invitees",
        "channel",
    }
)
_REFERENCE_WORDS = frozenset({"id", "ids", "uuid", "key"})
_URL_FORMATS = frozenset({"uri", "iri", "uri-reference", "iri-reference", "url"})
_HOST_FORMATS = frozenset({"hostname", "idn-hostname", "ipv4", "ipv6"})


def name_words(name: str) -> frozenset[str]:
    """The words of a parameter name: ``recipientEmail`` and ``recipient_email`` alike."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return frozenset(w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w)


def email_parts(value: str) -> tuple[str, str] | None:
    """``(local, domain)`` of a string that is exactly one e-mail address (``mailto:`` and
    surrounding ``<>`` allowed), lowercased; ``None`` otherwise."""
    text = value.strip().strip("<>").strip()
    if text.lower().startswith("mailto:"):
        text = text[7:]
    if not _EMAIL.match(text):
        return None
    local, _, domain = text.rpartition("@")
    return local.casefold(), domain.casefold().rstrip(".")


def host_of(value: str) -> str | None:
    """The host of a URL (``https://api.example.com:8443/x`` -> ``api.example.com``) or of a
    bare host (``Example.COM.`` -> ``example.com``), read as a URL parser does
    (:func:`~ctxwright.defence.hosts.canonical_host`: ``%65xample.com`` is ``example.com``);
    ``None`` when there is none."""
    text = value.strip()
    if not text or any(c.isspace() for c in text):
        return None
    parsed = urlsplit(text if "://" in text else "//" + text)
    try:
        host = parsed.hostname
    except ValueError:
        return None
    if not host:
        return None
    return canonical_host(host)


def _valid_host(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    labels = host.split(".")
    return bool(labels) and all(_LABEL.match(label) for label in labels)


def _under(host: str, domain: str) -> bool:
    """``host`` is ``domain`` or one of its subdomains (``mail.example.com`` under ``example.com``)."""
    return host == domain or host.endswith("." + domain)


@dataclass(frozen=True)
class Target:
    """One argument value that names where a call acts: ``argument`` is its place in the
    arguments (``to``, ``to[1]``, ``message.to``)."""

    argument: str
    type: TargetKind
    value: str

    def to_dict(self) -> dict[str, str]:
        return {"argument": self.argument, "type": self.type, "value": self.value}


@dataclass(frozen=True)
class GatePolicy:
    """The user's allowlists. Build one with :meth:`build` (it checks every entry) or
    :meth:`from_file`.

    * ``paths``: folders; a path target is covered when it resolves (symlinks and ``..``
      followed, relative paths taken from ``base``) inside one of them. The harness adds its
      workspace.
    * ``domains``: e-mail domains (``example.com`` covers ``bob@example.com`` and
      ``bob@mail.example.com``) and single addresses (``bob@example.com``), given together.
    * ``hosts``: hosts (``api.example.com``, its subdomains too) and URL prefixes
      (``https://example.com/hooks/``: that prefix only, scheme and port included).

    A target kind without any entry is *unlisted*: :meth:`covers` answers ``None``, and
    the gate's mode decides what that means (``defence/gate.py``).
    """

    paths: tuple[Path, ...] = ()
    domains: tuple[str, ...] = ()
    emails: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()
    url_prefixes: tuple[str, ...] = ()
    #: relative path targets are resolved from here (the workspace), else the process's cwd
    base: Path | None = field(default=None, compare=False)

    @classmethod
    def build(
        cls,
        *,
        paths: Iterable[str | Path] = (),
        domains: Iterable[str] = (),
        hosts: Iterable[str] = (),
        base: str | Path | None = None,
    ) -> GatePolicy:
        """Check and normalise every entry; :class:`~ctxwright.errors.GateRuleError` names the
        first one that is not a path, a domain or address, or a host or URL."""
        folders: list[Path] = []
        for entry in _entries(paths, "path"):
            text = str(entry)
            if not text.strip() or "\x00" in text or "://" in text or (_EMAIL.match(text.strip()) is not None):
                raise GateRuleError(
                    f"allowed path {text!r} is not a folder path: give a directory such as ./out or /srv/data"
                )
            folders.append(Path(os.path.expanduser(text)).resolve())
        emails: list[str] = []
        doms: list[str] = []
        for entry in map(str, _entries(domains, "domain")):
            parts = email_parts(entry)
            if parts is not None:
                emails.append(f"{parts[0]}@{parts[1]}")
                continue
            dom = entry.strip().lstrip("@").casefold().rstrip(".")
            if "." not in dom or not _valid_host(dom) or _is_ip(dom):
                raise GateRuleError(
                    f"allowed domain {entry!r} is neither an e-mail domain (example.com) nor an address "
                    "(bob@example.com)"
                )
            doms.append(dom)
        hs: list[str] = []
        prefixes: list[str] = []
        for entry in map(str, _entries(hosts, "host")):
            text = entry.strip()
            if "://" in text:
                parsed = urlsplit(text)
                host = host_of(text)
                if parsed.scheme not in ("http", "https") or host is None or not _valid_host(host):
                    raise GateRuleError(
                        f"allowed host {entry!r} is not an http(s) URL prefix with a host: give "
                        "https://example.com/path/ or a host such as api.example.com"
                    )
                prefixes.append(_url_key(text))
                continue
            host = host_of(text)
            if host is None or not _valid_host(host) or "/" in text or "@" in text:
                raise GateRuleError(
                    f"allowed host {entry!r} is not a host name or address: give api.example.com, "
                    "127.0.0.1 or a URL prefix such as https://example.com/hooks/"
                )
            hs.append(host)
        return cls(
            paths=tuple(dict.fromkeys(folders)),
            domains=tuple(dict.fromkeys(doms)),
            emails=tuple(dict.fromkeys(emails)),
            hosts=tuple(dict.fromkeys(hs)),
            url_prefixes=tuple(dict.fromkeys(prefixes)),
            base=Path(base).expanduser().resolve() if base is not None else None,
        )

    @classmethod
    def from_mapping(cls, rules: Mapping[str, Any], where: str = "gate rules") -> GatePolicy:
        """A policy from ``{"paths": [...], "domains": [...], "hosts": [...]}``; any other key
        is refused (a misspelt key would otherwise allow nothing, silently)."""
        if not isinstance(rules, Mapping):
            raise GateRuleError(f"{where}: expected a mapping with keys {', '.join(RULE_KEYS)}")
        unknown = sorted(str(k) for k in rules if k not in RULE_KEYS)
        if unknown:
            raise GateRuleError(f"{where}: unknown key(s) {', '.join(unknown)}; the keys are {', '.join(RULE_KEYS)}")
        lists: dict[str, list[str]] = {}
        for key in RULE_KEYS:
            value = rules.get(key) or []
            if isinstance(value, str) or not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise GateRuleError(f"{where}: '{key}' must be a list of strings")
            lists[key] = value
        return cls.build(paths=lists["paths"], domains=lists["domains"], hosts=lists["hosts"])

    @classmethod
    def from_file(cls, path: str | Path) -> GatePolicy:
        """Read a YAML (or JSON) rules file with the keys of :data:`RULE_KEYS`."""
        import yaml

        p = Path(path).expanduser()
        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8"))
        except OSError as exc:
            raise GateRuleError(f"gate rules {p}: cannot be read ({exc.strerror or exc})") from None
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise GateRuleError(f"gate rules {p}: not valid YAML ({first})") from None
        return cls.from_mapping(data if data is not None else {}, f"gate rules {p}")

    def merged(self, other: GatePolicy) -> GatePolicy:
        """Both policies' entries (``other``'s base when it has one)."""
        return GatePolicy(
            paths=tuple(dict.fromkeys((*self.paths, *other.paths))),
            domains=tuple(dict.fromkeys((*self.domains, *other.domains))),
            emails=tuple(dict.fromkeys((*self.emails, *other.emails))),
            hosts=tuple(dict.fromkeys((*self.hosts, *other.hosts))),
            url_prefixes=tuple(dict.fromkeys((*self.url_prefixes, *other.url_prefixes))),
            base=other.base or self.base,
        )

    def with_folder(self, folder: str | Path) -> GatePolicy:
        """This policy with ``folder`` allowed and used as the base of relative paths (the workspace)."""
        root = Path(folder).expanduser().resolve()
        return GatePolicy(
            paths=tuple(dict.fromkeys((root, *self.paths))),
            domains=self.domains,
            emails=self.emails,
            hosts=self.hosts,
            url_prefixes=self.url_prefixes,
            base=root,
        )

    @property
    def empty(self) -> bool:
        return not (self.paths or self.domains or self.emails or self.hosts or self.url_prefixes)

    def to_dict(self) -> dict[str, list[str]]:
        """The rules as a rules file holds them (what the session records)."""
        return {
            "paths": [str(p) for p in self.paths],
            "domains": [*self.domains, *self.emails],
            "hosts": [*self.hosts, *self.url_prefixes],
        }

    def covers(self, target: Target) -> bool | None:
        """``True`` when an allowlist covers ``target``, ``False`` when the lists of its kind
        do not, ``None`` when there is no list of its kind (or it is a recipient name)."""
        if target.type == "path":
            if not self.paths:
                return None
            return self._path_inside(target.value)
        if target.type == "email":
            if not (self.domains or self.emails):
                return None
            parts = email_parts(target.value)
            if parts is None:
                return False
            address = f"{parts[0]}@{parts[1]}"
            return address in self.emails or any(_under(parts[1], d) for d in self.domains)
        if target.type in ("url", "host"):
            if not (self.hosts or self.url_prefixes):
                return None
            host = host_of(target.value)
            if host is None:
                return False
            if any(_under(host, h) for h in self.hosts):
                return True
            if target.type == "url" and "://" in target.value:
                key = _url_key(target.value)
                return any(key.startswith(p) for p in self.url_prefixes)
            return False
        return None

    def _path_inside(self, value: str) -> bool:
        text = os.path.expanduser(value.strip())
        if not text or "\x00" in text:
            return False
        p = Path(text)
        if not p.is_absolute():
            p = (self.base or Path.cwd()) / p
        try:
            resolved = p.resolve()
        except (OSError, RuntimeError):
            return False
        return any(resolved == root or resolved.is_relative_to(root) for root in self.paths)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def _url_key(url: str) -> str:
    """A URL compared by prefix: scheme and host lowercased, the default port dropped."""
    parsed = urlsplit(url.strip())
    host = (parsed.hostname or "").casefold()
    try:
        port = parsed.port
    except ValueError:
        port = None
    scheme = parsed.scheme.casefold()
    netloc = host if port is None or (scheme, port) in (("http", 80), ("https", 443)) else f"{host}:{port}"
    return f"{scheme}://{netloc}{parsed.path or '/'}"


def _entries(values: Iterable[str | Path] | str | Path, what: str) -> Iterator[str | Path]:
    if isinstance(values, (str, Path)):  # one entry given bare: a common slip, taken as a list of one
        values = [values]
    for v in values:
        if not isinstance(v, (str, Path)):
            raise GateRuleError(f"allowed {what} {v!r} is a {type(v).__name__}, not a string")
        yield v


# --------------------------------------------------------------------------- targets


def _classify(name: str, schema: Mapping[str, Any], value: str) -> TargetKind | None:
    fmt = schema.get("format") if isinstance(schema, Mapping) else None
    if fmt in ("email", "idn-email"):
        return "email" if email_parts(value) is not None else "recipient"
    if fmt in _URL_FORMATS:
        return "url"
    if fmt in _HOST_FORMATS:
        return "host"
    text = value.strip()
    if email_parts(text) is not None:
        return "email"
    if re.match(r"^https?://\S+$", text, re.IGNORECASE):
        return "url"
    words = name_words(name)
    if words & _REFERENCE_WORDS:
        return None
    if words & _URL_WORDS:
        return "url"
    if words & _HOST_WORDS:
        return "host"
    if words & _PATH_WORDS:
        return "path"
    if words & _RECIPIENT_WORDS:
        return "recipient"
    if (text.startswith("/") or text.startswith("~/")) and len(text) > 1 and not any(c.isspace() for c in text):
        return "path"
    return None


def _child_schema(schema: Mapping[str, Any], key: str | None) -> Mapping[str, Any]:
    if not isinstance(schema, Mapping):
        return {}
    if key is None:
        items = schema.get("items")
        return items if isinstance(items, Mapping) else {}
    props = schema.get("properties")
    if isinstance(props, Mapping) and isinstance(props.get(key), Mapping):
        return props[key]
    return {}


def leaves(
    arguments: Any, schema: Mapping[str, Any] | None = None, name: str = "", where: str = ""
) -> Iterator[tuple[str, str, Mapping[str, Any], Any]]:
    """Every scalar of ``arguments`` as ``(place, parameter name, its schema, value)``:
    ``place`` is ``to``, ``to[1]`` or ``message.to``; a list item keeps its list's name."""
    schema = schema or {}
    if isinstance(arguments, Mapping):
        for k, v in arguments.items():
            key = str(k)
            yield from leaves(v, _child_schema(schema, key), key, f"{where}.{key}" if where else key)
    elif isinstance(arguments, Sequence) and not isinstance(arguments, (str, bytes)):
        for i, item in enumerate(arguments):
            yield from leaves(item, _child_schema(schema, None), name, f"{where}[{i}]")
    else:
        yield where, name, schema, arguments


def targets_of(arguments: Mapping[str, Any], schema: Mapping[str, Any] | None = None) -> tuple[Target, ...]:
    """The targets in a call's arguments, by the rules in this module's docstring."""
    out: list[Target] = []
    for place, name, prop, value in leaves(arguments, schema):
        if isinstance(value, str) and value.strip():
            kind = _classify(name, prop, value)
            if kind is not None:
                out.append(Target(place, kind, value))
    return tuple(out)

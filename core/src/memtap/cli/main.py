"""The ``memtap`` command line (click + rich)."""

from __future__ import annotations

import functools
import json
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import click

from memtap import __version__
from memtap.errors import MemtapError, StoreError, install_hint
from memtap.memory import STORE_ENV, Memory, default_store_url, plugin_manager
from memtap.plugins import PluginLoadWarning, PluginManager
from memtap.protocol.model import to_dict
from memtap.storage.store import StoreNotFoundError, as_store_url, require_existing_store

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

F = TypeVar("F", bound=Callable[..., Any])


@functools.cache
def console() -> Console:
    """The command line's rich console (standard output), made on first use: a command
    that prints nothing through rich (``--help``, ``proxy``, ``ui``, ``mcp``) does not
    import rich."""
    from rich.console import Console

    return Console(highlight=False)


def error_console(*, highlight: bool = True) -> Console:
    """A rich console on standard error (progress, reports)."""
    from rich.console import Console

    return Console(stderr=True, highlight=highlight)


def store_option(func: F) -> F:
    """The ``--store URL`` option every store command takes (env ``MEMTAP_STORE``)."""
    return click.option(
        "--store",
        "store_url",
        envvar=STORE_ENV,
        default=None,
        metavar="URL",
        help="Store URL (duckdb:///path, postgresql://..., memory://) or a path to a .duckdb file. "
        "Default: $MEMTAP_STORE, else a DuckDB file under $MEMTAP_HOME.",
    )(func)


def store_url_for(store_url: str | None, *, create: bool) -> str:
    """The store a command names (``--store``, else the default). A command that only reads
    passes ``create=False``: a missing store is then an error, not a new empty store."""
    url = as_store_url(store_url) if store_url else default_store_url()
    if not create:
        try:
            require_existing_store(url)
        except StoreNotFoundError as exc:
            hint = f"(or name an existing store with --store or ${STORE_ENV})"
            raise click.ClickException(f"{exc} {hint}") from exc
    return url


def open_memory(store_url: str | None, *, embedder: bool = False) -> Memory:
    """Open an existing store for a CLI command (errors become one-line CLI errors in
    :class:`MemtapGroup`). Without ``embedder`` (a command that does not recall: it lists,
    shows or deletes what is stored) no embedder is made, nor its model and numpy imported."""
    from memtap.memory import open_store

    # The store is opened here, not by Memory: a command on a store another process holds
    # ends with one line naming the ways out, where an app's Memory would wait for it.
    store = open_store(store_url_for(store_url, create=False), plugin_manager())
    return Memory(store, embedder=None if embedder else False)  # None: the default embedder


def require_entity(mem: Memory, entity: str | None) -> None:
    """A one-line error when ``entity`` has nothing in the store (a typo must not pass for
    an empty memory)."""
    if entity is not None and entity not in mem.store.entities():
        raise click.ClickException(
            f"no entity {entity!r} in {mem.url} (`memtap entities` lists the entities it has)"
        )


def _one_line(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


class MemtapGroup(click.Group):
    """The ``memtap`` command group: core's commands, and those plugins add through the
    ``memtap_cli_commands`` hook. memtap's own errors (store, URL, export format) from any
    command end as one ``Error: ...`` line saying what to do, never as a traceback.

    Plugins are loaded the first time the group lists its commands (``memtap --help``) or
    is asked for one it does not have itself, so core's own commands start without them.
    A plugin command named like one of core's is ignored (with a warning).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._plugin_commands_added = False

    def add_plugin_commands(self, pm: PluginManager | None = None) -> None:
        """Let the plugins of ``pm`` (default: the installed ones) add their commands, once;
        then add the ``proxy`` placeholder if no plugin provided ``proxy``."""
        if self._plugin_commands_added:
            return
        self._plugin_commands_added = True
        own = dict(self.commands)
        try:
            (pm or plugin_manager()).hook.memtap_cli_commands(cli=self)
        except Exception as exc:
            warnings.warn(
                f"a memtap plugin failed to add its commands: {type(exc).__name__}: {exc}",
                PluginLoadWarning,
                stacklevel=2,
            )
        for name, command in own.items():
            if self.commands.get(name) is not command:
                warnings.warn(
                    f"a memtap plugin's command {name!r} is ignored: memtap has its own {name!r}",
                    PluginLoadWarning,
                    stacklevel=2,
                )
                self.commands[name] = command
        if "proxy" not in self.commands:
            self.add_command(proxy_placeholder)
        if "mcp" not in self.commands:
            self.add_command(mcp_placeholder)
        if "ui" not in self.commands:
            self.add_command(ui_placeholder)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command, turning memtap's errors (every one is a :class:`MemtapError`:
        store, URL, export format...) into :class:`click.ClickException`."""
        try:
            return super().invoke(ctx)
        except MemtapError as exc:
            raise click.ClickException(_one_line(str(exc))) from exc

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command, plugins' included."""
        self.add_plugin_commands()
        return super().list_commands(ctx)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """Core's command ``cmd_name``, else a plugin's (plugins are loaded for it)."""
        if cmd_name not in self.commands:
            self.add_plugin_commands()
        return super().get_command(ctx, cmd_name)


def titled_table(title: str) -> Table:
    """A table whose title stays on one line when the terminal is wide enough (a table is
    as wide as its columns, and rich wraps a longer title to that width)."""
    from rich.table import Table

    return Table(title=title, min_width=min(len(title), console().width))


@click.group(cls=MemtapGroup)
@click.version_option(__version__, prog_name="memtap")
def main() -> None:
    """memtap: long-term memory for LLM applications, without changing their code."""


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def plugins(as_json: bool) -> None:
    """List loaded plugins: distribution, version and the hooks each implements."""
    pm = plugin_manager()
    infos = pm.describe()
    if as_json:
        click.echo(json.dumps([to_dict(i) for i in infos], indent=2))
        return
    from rich.table import Table

    table = Table(title="memtap plugins")
    for col in ("name", "distribution", "version", "hooks"):
        table.add_column(col)
    for info in infos:
        table.add_row(info.name, info.distribution or "-", info.version or "-", "\n".join(info.hooks))
    console().print(table)


@main.command()
@store_option
@click.option("--entity", default=None, help="Only this entity's sessions.")
@click.option("--limit", default=50, show_default=True, help="How many sessions.")
def sessions(store_url: str | None, entity: str | None, limit: int) -> None:
    """List stored sessions, most recently active first."""
    with open_memory(store_url) as mem:
        require_entity(mem, entity)
        rows = mem.sessions(entity_id=entity, limit=limit)
    table = titled_table(f"sessions in {mem.url}")
    for col in ("session", "entity", "process", "exchanges", "last active (UTC)"):
        table.add_column(col)
    for s in rows:
        table.add_row(
            s.session_id,
            s.entity_id,
            s.process_id or "-",
            str(s.exchange_count),
            s.updated_at.strftime("%Y-%m-%d %H:%M:%S"),
        )
    console().print(table)


@main.command()
@store_option
@click.argument("session")
@click.option("--entity", default=None, help="Only this entity's messages in the session.")
def history(store_url: str | None, session: str, entity: str | None) -> None:
    """Show a session's messages, oldest first."""
    with open_memory(store_url) as mem:
        messages = mem.history(session, entity_id=entity)
    if not messages:
        of = f" of entity {entity!r}" if entity is not None else ""
        raise click.ClickException(
            f"no session {session!r}{of} in {mem.url} (`memtap sessions` lists the sessions, "
            "`memtap entities` the entities)"
        )
    for m in messages:
        console().print(m, soft_wrap=True)


@main.command()
@store_option
def stats(store_url: str | None) -> None:
    """Row counts of the store."""
    with open_memory(store_url) as mem:
        counts = mem.stats()
    table = titled_table(f"store {mem.url}")
    table.add_column("table")
    table.add_column("rows", justify="right")
    for name, count in counts.items():
        table.add_row(name, str(count))
    # Records the store refused, kept beside it (`memtap quarantine list` shows them).
    table.add_row("quarantined", str(mem.quarantine.count()))
    console().print(table)


@main.group()
def quarantine() -> None:
    """Captured calls and facts the store refused (text it cannot hold, a value out of
    range, a constraint), kept redacted beside it instead of blocking the records behind
    them: list them, retry or drop the calls."""


@quarantine.command(name="list")
@store_option
@click.option(
    "--json", "as_json", is_flag=True, help="Print JSON (the records, redacted) instead of a table."
)
def quarantine_list(store_url: str | None, as_json: bool) -> None:
    """List the quarantined calls, oldest first, with why the store refused each, then the
    quarantined facts (remembered or memorized facts the store refused)."""
    from memtap.cli.quarantine import quarantine_facts_table, quarantine_table

    with open_memory(store_url) as mem:
        records = list(mem.quarantine.records())
        facts = mem.quarantine.facts()
        where = mem.quarantine.directory
    if as_json:
        rows: list[dict[str, Any]] = [
            {"at": r.at.isoformat(), "reason": r.reason, "exchange": to_dict(r.exchange)} for r in records
        ]
        rows += [{"reason": reason, "fact": to_dict(fact)} for fact, reason in facts]
        click.echo(json.dumps(rows, indent=2))
        return
    if not records and not facts:
        console().print(f"no quarantined calls or facts for {mem.url}")
        return
    if records:
        console().print(quarantine_table(records, f"quarantined calls of {mem.url} (in {where or 'memory'})"))
    if facts:
        console().print(
            quarantine_facts_table(facts, f"quarantined facts of {mem.url} (in {where or 'memory'})")
        )


def confirm_delete(what: str, question: str) -> None:
    """Ask ``question`` before deleting ``what`` (aborts on no); refuse, saying how to
    go on, when there is no terminal to ask on."""
    if not sys.stdin.isatty():
        raise click.ClickException(
            f"not deleting {what}: memtap cannot ask for confirmation (stdin is not a terminal); "
            "pass --yes to delete without asking"
        )
    click.confirm(question, abort=True)


def _chosen(ids: tuple[str, ...], every: bool, verb: str) -> list[str] | None:
    if bool(ids) == every:
        raise click.UsageError(
            f"name the calls to {verb} (their ids, from `memtap quarantine list`) or give --all"
        )
    return None if every else list(ids)


@quarantine.command(name="retry")
@store_option
@click.argument("ids", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Retry every quarantined call.")
def quarantine_retry(store_url: str | None, ids: tuple[str, ...], every: bool) -> None:
    """Store quarantined calls again (made storable first: unstorable characters become
    U+FFFD); each one stored leaves the quarantine, the others stay."""
    chosen = _chosen(ids, every, "retry")
    with open_memory(store_url) as mem:
        stored, refused = mem.quarantine.retry(mem.store, chosen)
    report = f"stored {stored} quarantined call(s)"
    if refused:
        report += f"; {refused} still refused (kept: `memtap quarantine list` says why)"
    console().print(report)


@quarantine.command(name="drop")
@store_option
@click.argument("ids", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Drop every quarantined call.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def quarantine_drop(store_url: str | None, ids: tuple[str, ...], every: bool, yes: bool) -> None:
    """Delete quarantined calls for good (asks first, unless --yes)."""
    chosen = _chosen(ids, every, "drop")
    what = "every quarantined call" if chosen is None else f"{len(chosen)} quarantined call(s)"
    if not yes:
        confirm_delete(what, f"Delete {what}?")
    with open_memory(store_url) as mem:
        dropped = mem.quarantine.drop(chosen)
    console().print(f"dropped {dropped} quarantined call(s)")


@main.command()
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
def entities(store_url: str | None, as_json: bool) -> None:
    """List the entities with memory (a session or a fact), sorted."""
    with open_memory(store_url) as mem:
        names = mem.store.entities()
    if as_json:
        click.echo(json.dumps(names, ensure_ascii=False))
        return
    table = titled_table(f"entities in {mem.url}")
    table.add_column("entity")
    for name in names:
        table.add_row(name)
    console().print(table)


@main.command()
@store_option
@click.option("--entity", required=True, help="Whose facts.")
def facts(store_url: str | None, entity: str) -> None:
    """List an entity's current facts, newest first."""
    with open_memory(store_url) as mem:
        require_entity(mem, entity)
        rows = mem.facts(entity_id=entity)
    table = titled_table(f"facts of {entity}")
    table.add_column("created (UTC)")
    table.add_column("fact")
    for f in rows:
        table.add_row(f.created_at.strftime("%Y-%m-%d %H:%M:%S"), f.text)
    console().print(table)


@main.command()
@store_option
@click.argument("query")
@click.option("--entity", required=True, help="Whose facts to search.")
@click.option("-k", default=5, show_default=True, help="How many facts.")
def recall(store_url: str | None, query: str, entity: str, k: int) -> None:
    """Recall an entity's facts most relevant to QUERY, with scores."""
    with open_memory(store_url, embedder=True) as mem:
        require_entity(mem, entity)
        rows = mem.recall(query, entity_id=entity, k=k)
    table = titled_table(f"recall {query!r} for {entity}")
    table.add_column("score", justify="right")
    table.add_column("fact")
    for s in rows:
        table.add_row(f"{s.score:.3f}", s.text)
    console().print(table)


@main.command()
@store_option
@click.option("--entity", required=True, help="Whose data to delete.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def forget(store_url: str | None, entity: str, yes: bool) -> None:
    """Delete everything stored for an entity (asks first, unless --yes)."""
    if not yes:
        confirm_delete(f"the memory of entity {entity!r}", f"Delete all memory of entity {entity!r}?")
    with open_memory(store_url) as mem:
        require_entity(mem, entity)
        count = mem.forget(entity_id=entity)
    console().print(f"deleted {count} record(s) of {entity!r}")


@main.command()
@store_option
@click.argument("exchange_id", required=False)
@click.option("--session", default=None, help="List this session's captured calls (ids, what was injected).")
@click.option("--entity", default=None, help="With --session: only this entity's calls.")
@click.option("--last", is_flag=True, help="With --session: explain the session's latest call.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def explain(
    store_url: str | None,
    exchange_id: str | None,
    session: str | None,
    entity: str | None,
    last: bool,
    as_json: bool,
) -> None:
    """Show what memtap injected into the captured call EXCHANGE_ID, and why: the history
    turns, the recalled facts with their score and score parts, the facts left out (and
    the reason). With --session instead, list that session's calls and their ids (--last:
    explain its latest call)."""
    from memtap.cli.explain import exchanges_table, render

    if (exchange_id is None) == (session is None):
        raise click.UsageError("give an EXCHANGE_ID, or --session SESSION to list a session's calls")
    if last and session is None:
        raise click.UsageError("--last goes with --session SESSION")
    with open_memory(store_url) as mem:
        if session is not None and last:
            calls = mem.exchanges(session_id=session, entity_id=entity)
            if not calls:
                raise click.ClickException(f"no captured call in session {session!r} of {mem.url}")
            exchange_id, session = calls[-1].id, None
        if session is not None:
            rows = mem.exchanges(session_id=session, entity_id=entity)
            if as_json:
                click.echo(json.dumps([to_dict(ex) for ex in rows], indent=2, ensure_ascii=False))
            else:
                console().print(exchanges_table(rows, f"calls of session {session}"))
            return
        assert exchange_id is not None
        found = mem.explain(exchange_id)
    if found is None:
        raise click.ClickException(
            f"no captured call with id {exchange_id!r} in {mem.url} "
            "(`memtap explain --session SESSION` lists a session's calls with their ids)"
        )
    if as_json:
        click.echo(json.dumps(found.to_dict(), indent=2, ensure_ascii=False))
    else:
        render(found, console())


@main.command()
@store_option
def demo(store_url: str | None) -> None:
    """Run offline: a local scripted model, the real openai SDK, memory across two runs."""
    from memtap.cli.demo import run_demo

    run_demo(store_url, console())


def _placeholder(name: str, package: str, summary: str) -> click.Command:
    """A command named ``name`` that says how to install ``package``, which provides it: in
    the group only when no installed plugin provides ``name``."""

    def needs_package(args: tuple[str, ...]) -> None:
        raise click.ClickException(f"memtap {name} needs the {package} package: {install_hint(package)}")

    needs_package.__doc__ = summary
    command = click.command(
        name,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
    )(click.argument("args", nargs=-1, type=click.UNPROCESSED)(needs_package))
    return command


proxy_placeholder = _placeholder(
    "proxy",
    "memtap-proxy",
    "Run memtap as a local HTTP proxy for agents (`memtap proxy --help`; needs memtap-proxy).",
)
mcp_placeholder = _placeholder(
    "mcp", "memtap-mcp", "Serve memory as MCP tools to agents (`memtap mcp --help`; needs memtap-mcp)."
)
ui_placeholder = _placeholder(
    "ui", "memtap-ui", "Browse memory in a web browser (`memtap ui --help`; needs memtap-ui)."
)


def _open_store(store_url: str | None, *, create: bool = False) -> Any:
    """The store a CLI command names, opened without a Memory (no capture machinery)."""
    from memtap.memory import open_store

    return open_store(store_url_for(store_url, create=create), plugin_manager())


def _progress() -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=error_console(), transient=False,
    )  # fmt: skip


@main.command(name="export")
@store_option
@click.option("-o", "--output", "output", required=True, type=click.Path(dir_okay=False, allow_dash=True),
              help="The JSONL file to write ('-' for standard output).")  # fmt: skip
def export_command(store_url: str | None, output: str) -> None:
    """Export every exchange and fact of a store as JSONL (for `memtap import`)."""
    from memtap.cli.transfer import write_export

    store = _open_store(store_url)
    try:
        counts = store.stats()
        try:
            out = click.open_file(output, "w", encoding="utf-8")
        except OSError as exc:
            raise click.ClickException(
                f"cannot write {output}: {exc.strerror or exc}; name a file in an existing writable directory"
            ) from exc
        with out, _progress() as bar:
            task = bar.add_task("exporting", total=counts["exchanges"] + counts["facts"])
            written = write_export(store, out, lambda n: bar.advance(task, n))
    finally:
        store.close()
    error_console().print(
        f"exported {written['exchange']} exchange(s) and {written['fact']} fact(s)", soft_wrap=True
    )


@main.command(name="import")
@store_option
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
def import_command(store_url: str | None, file: str) -> None:
    """Import a JSONL export into a store (records already there are skipped)."""
    from memtap.cli.transfer import ExportFormatError, import_records, read_records

    store = _open_store(store_url, create=True)
    try:
        with click.open_file(file, "r", encoding="utf-8") as f:
            lines = f.readlines()
        before = store.stats()
        with _progress() as bar:
            task = bar.add_task("importing", total=max(len(lines) - 1, 0))
            read = import_records(store, read_records(lines), lambda n: bar.advance(task, n))
        after = store.stats()
    except (StoreError, ExportFormatError) as exc:
        raise click.ClickException(_one_line(f"{file}: {exc}")) from exc
    finally:
        store.close()
    # Records already stored are skipped by the store: what is new is what the counts gained.
    new = {"exchange": after["exchanges"] - before["exchanges"], "fact": after["facts"] - before["facts"]}
    report = f"imported {new['exchange']} new exchange(s) and {new['fact']} new fact(s)"
    present = {kind: max(read[kind] - new[kind], 0) for kind in new}
    if any(present.values()):
        report += f"; {present['exchange']} exchange(s) and {present['fact']} fact(s) were already present"
    error_console().print(report, soft_wrap=True)


#: Bad lines of a transcript listed before the summary error (the rest are counted).
SHOWN_PROBLEMS = 20


@main.command(name="import-transcript")
@store_option
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option("--entity", required=True, help="Whose memory the conversation becomes.")
@click.option("--session", default=None,
              help="Session of the messages that name none (default: import-<hash of the first message>, "
                   "so a renamed copy is the same transcript).")  # fmt: skip
def import_transcript_command(store_url: str | None, file: str, entity: str, session: str | None) -> None:
    """Import a conversation transcript: JSONL, one message per line, e.g.
    {"role": "user", "content": "...", "at": "2023-05-08T13:56:00Z"}. Roles user,
    assistant, system, tool; the time as "at", "timestamp" or "created_at" (ISO 8601, or
    seconds since 1970); optionally "session_id". Messages are paired into turns and
    captured with their times; turns already imported are skipped."""
    import contextlib
    import tempfile

    from memtap.cli.transcript import (
        IMPORT_EMBED_MESSAGES,
        TranscriptError,
        import_turns,
        iter_turns,
        messages_of,
        scan_transcript,
        transcript_session,
    )

    name = "stdin" if file == "-" else Path(file).name
    with contextlib.ExitStack() as stack:
        path = Path(file)
        if file == "-":  # read twice (checked, then imported): kept in a private temporary file
            temporary: IO[bytes] = stack.enter_context(
                tempfile.NamedTemporaryFile("w+b", prefix="memtap-transcript-")
            )
            stdin = sys.stdin.buffer
            while chunk := stdin.read(1 << 20):
                temporary.write(chunk)
            temporary.flush()
            path = Path(temporary.name)
        try:
            with path.open(encoding="utf-8") as f:
                scan = scan_transcript(f, name)
        except UnicodeDecodeError as exc:
            raise click.ClickException(f"{name}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
        except TranscriptError as exc:
            err = error_console(highlight=False)
            for number, problem in exc.problems[:SHOWN_PROBLEMS]:
                err.print(f"{name}:{number}: {problem}", soft_wrap=True, markup=False)
            if exc.bad_lines > SHOWN_PROBLEMS:
                err.print(f"... and {exc.bad_lines - SHOWN_PROBLEMS} more bad line(s)", soft_wrap=True)
            raise click.ClickException(str(exc)) from exc
        if scan.first is None:
            error_console(highlight=False).print(f"{name}: no messages; nothing was imported")
            return
        default_session = session or transcript_session(scan.first)
        # Before transcripts were known by their content, their session was the file's name.
        legacy = () if session or file == "-" else (f"import-{Path(name).stem}",)
        with Memory(store_url_for(store_url, create=True)) as mem, path.open(encoding="utf-8") as f:
            report = import_turns(
                mem,
                iter_turns(messages_of(f, name), default_session),
                entity_id=entity,
                sessions={*scan.sessions, default_session} if scan.unnamed else scan.sessions,
                also_in=legacy,
                embed=scan.messages <= IMPORT_EMBED_MESSAGES,
            )
    summary = f"imported {report.new} new turn(s) of {entity!r} in {report.sessions} session(s)"
    if report.present:
        summary += f"; {report.present} turn(s) were already present"
    if report.unembedded:
        summary += (
            f"; their {report.unembedded} fact(s) are recallable by words now, and by meaning once embedded "
            f"in the background by the next process that recalls for {entity!r} (the proxy, the UI, "
            "the MCP server or an app)"
        )
    error_console(highlight=False).print(summary, soft_wrap=True, markup=False)

"""Run a pinned Apache Kafka release from Maven Central: its tools and a one-node KRaft broker.

Used by the conformance tests in ``tests/kafka/`` and by hand through
``kafka_harness/kafka`` (``fetch``, ``smoke``, ``broker``, ``dump``).  Everything runs Kafka's
own code, unmodified:

* :func:`fetch` resolves the broker artifact ``org.apache.kafka:kafka_2.13`` and
  ``kafka-tools`` (pinned in ``kafka_harness/pom.xml``) with their runtime
  dependencies through ``mvn dependency:build-classpath``.  The jars stay in the
  local Maven repository (``~/.m2``); the resolved classpath is cached in
  ``.cache/kafka/<version>/classpath.txt`` so later runs do not start Maven.
* :class:`KafkaDist` runs one of Kafka's command-line tools (``StorageTool``,
  ``DumpLogSegments``, ``TopicCommand``, ``ConsoleProducer``, ``ConsoleConsumer``)
  as ``java -cp <classpath> <main class>``.
* :mod:`kafka_harness.broker` runs a one-node KRaft broker with them, and
  :mod:`kafka_harness.cli` is the command line (``kafka_harness/kafka``).

Threads: :class:`KafkaDist` is immutable; each call runs its own process.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

__all__ = [
    "BROKER_MAIN",
    "CLUSTER_KAFKA_VERSION",
    "CONSOLE_CONSUMER",
    "CONSOLE_PRODUCER",
    "KAFKA_VERSION",
    "NULL_MARKER",
    "TOPIC_COMMAND",
    "KafkaDist",
    "KafkaRuntimeError",
    "ToolError",
    "fetch",
    "kill_process_group",
    "missing_prerequisites",
    "new_cluster_id",
]

KAFKA_VERSION: Final = "3.9.2"
"""The Apache Kafka release under test; keep in step with ``kafka_harness/pom.xml``."""

CLUSTER_KAFKA_VERSION: Final = "4.4.0"
"""The 4.x release the distributed mode is tested on (KIP-848 groups, transactions v2);
keep in step with ``kafka_harness/pom-4.xml``.  The file-format conformance tests stay
on :data:`KAFKA_VERSION`."""

REPO_ROOT: Final = Path(__file__).resolve().parents[1]
POM: Final = Path(__file__).resolve().with_name("pom.xml")
POM_4: Final = Path(__file__).resolve().with_name("pom-4.xml")
"""Kafka 4.x logs through log4j2: another logging binding, so another POM."""
DEFAULT_CACHE_DIR: Final = REPO_ROOT / ".cache" / "kafka"

NULL_MARKER: Final = "<null>"
"""How a null value (a tombstone) is spelled on the console producer's and consumer's lines."""

BROKER_MAIN: Final = "kafka.Kafka"
STORAGE_TOOL: Final = "kafka.tools.StorageTool"
DUMP_LOG_SEGMENTS: Final = "kafka.tools.DumpLogSegments"
TOPIC_COMMAND: Final = "org.apache.kafka.tools.TopicCommand"
CONSOLE_PRODUCER: Final = "kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER: Final = "org.apache.kafka.tools.consumer.ConsoleConsumer"

# Short-lived JVMs (tools, and a test broker that lives seconds) start faster and use
# less CPU on a small machine with the client compiler only and a small heap.
_TOOL_JVM_OPTS: Final = ("-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
BROKER_JVM_OPTS: Final = ("-Xms256m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")

_LOG4J_BROKER: Final = """\
log4j.rootLogger=INFO, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.kafka.clients=WARN
log4j.logger.org.apache.kafka.common.utils.AppInfoParser=WARN
"""
_LOG4J2_BROKER: Final = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
logger.clients.name = org.apache.kafka.clients
logger.clients.level = warn
logger.appinfo.name = org.apache.kafka.common.utils.AppInfoParser
logger.appinfo.level = warn
"""
_LOG4J2_TOOLS: Final = """\
status = warn
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.err.ref = err
"""
# Tools print their results on stdout: their own logging goes to stderr, warnings only.
_LOG4J_TOOLS: Final = """\
log4j.rootLogger=WARN, err
log4j.appender.err=org.apache.log4j.ConsoleAppender
log4j.appender.err.Target=System.err
log4j.appender.err.layout=org.apache.log4j.PatternLayout
log4j.appender.err.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


class KafkaRuntimeError(Exception):
    """Kafka could not be fetched, started or driven."""


class ToolError(KafkaRuntimeError):
    """A Kafka command-line tool exited with a failure status (or timed out)."""

    def __init__(
        self, argv: Sequence[str], returncode: int | None, stdout: str, stderr: str
    ) -> None:
        status = "timed out" if returncode is None else f"exited with status {returncode}"
        super().__init__(
            f"{argv[-1] if argv else '?'}: {' '.join(argv[:1])} ... {status}\n"
            f"--- stdout (tail) ---\n{stdout[-4000:]}\n--- stderr (tail) ---\n{stderr[-4000:]}"
        )
        self.argv = list(argv)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


def missing_prerequisites() -> str | None:
    """Why Kafka cannot run here (``java`` or ``mvn`` not on PATH), or ``None`` if it can."""
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if not missing:
        return None
    return (
        f"Kafka conformance checks NOT RUN: {' and '.join(missing)} not found on PATH "
        f"(they need Java 17+ and Maven to run Apache Kafka {KAFKA_VERSION})"
    )


def _classpath_is_complete(entries: Sequence[Path]) -> bool:
    return bool(entries) and all(entry.is_file() for entry in entries)


def fetch(
    cache_dir: Path = DEFAULT_CACHE_DIR, *, version: str = KAFKA_VERSION, timeout_s: float = 900
) -> KafkaDist:
    """Resolve Kafka ``version`` with Maven (once) and return a :class:`KafkaDist` for it.

    The classpath is cached in ``cache_dir/<version>/classpath.txt``; Maven runs only
    when that file is missing or names a jar that is gone.
    """
    home = cache_dir / version
    home.mkdir(parents=True, exist_ok=True)
    cp_file = home / "classpath.txt"
    entries: list[Path] = []
    if cp_file.is_file():
        entries = [Path(p) for p in cp_file.read_text().strip().split(os.pathsep) if p]
    if not _classpath_is_complete(entries):
        if shutil.which("mvn") is None:
            raise KafkaRuntimeError("mvn is not on PATH: cannot fetch Apache Kafka")
        tmp = home / f"classpath.txt.{os.getpid()}.tmp"  # concurrent runs: one file each
        argv = [
            "mvn",
            "--batch-mode",
            "--quiet",
            "--file",
            str(POM_4 if _is_4x(version) else POM),
            f"-Dkafka.version={version}",
            "-Dmdep.includeScope=runtime",
            f"-Dmdep.outputFile={tmp}",
            "dependency:build-classpath",
        ]
        _run(argv, timeout_s=timeout_s, cwd=home)
        tmp.replace(cp_file)
        entries = [Path(p) for p in cp_file.read_text().strip().split(os.pathsep) if p]
        if not _classpath_is_complete(entries):
            raise KafkaRuntimeError(f"Maven wrote an incomplete classpath to {cp_file}")
    for name, text in (
        ("log4j-broker.properties", _LOG4J_BROKER),
        ("log4j-tools.properties", _LOG4J_TOOLS),
        ("log4j2-broker.properties", _LOG4J2_BROKER),
        ("log4j2-tools.properties", _LOG4J2_TOOLS),
    ):
        path = home / name
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
    return KafkaDist(version=version, home=home, classpath=tuple(entries))


def _is_4x(version: str) -> bool:
    """Whether ``version`` is a Kafka 4.x (or later) release: log4j2, ``pom-4.xml``."""
    return int(version.split(".", 1)[0]) >= 4


def _run(
    argv: Sequence[str],
    *,
    timeout_s: float,
    cwd: Path | None = None,
    stdin_text: str | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` to completion in its own process group; kill the group on timeout."""
    with subprocess.Popen(
        list(argv),
        cwd=cwd,
        stdin=subprocess.PIPE if stdin_text is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            stdout, stderr = proc.communicate(stdin_text, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_process_group(proc)
            stdout, stderr = proc.communicate()
            raise ToolError(argv, None, stdout, stderr) from None
        except BaseException:
            kill_process_group(proc)
            raise
    if check and proc.returncode != 0:
        raise ToolError(argv, proc.returncode, stdout, stderr)
    return subprocess.CompletedProcess(list(argv), proc.returncode, stdout, stderr)


def kill_process_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL the process group led by ``proc`` (which we started with its own session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)


@dataclass(frozen=True)
class KafkaDist:
    """A resolved Kafka release: runs its tools with ``java``.  Immutable, thread-safe."""

    version: str
    home: Path
    classpath: tuple[Path, ...]

    def java_argv(
        self,
        main_class: str,
        args: Sequence[str],
        *,
        jvm_opts: Sequence[str] = _TOOL_JVM_OPTS,
        log4j: str = "tools",
    ) -> list[str]:
        """The command line that runs ``main_class args`` on this release's classpath.

        ``log4j`` picks the logging configuration: ``"tools"`` (warnings, to stderr,
        so that stdout holds only the tool's output) or ``"broker"`` (INFO, stdout).
        """
        if _is_4x(self.version):
            logging_opt = f"-Dlog4j2.configurationFile={self.home / f'log4j2-{log4j}.properties'}"
        else:
            logging_opt = f"-Dlog4j.configuration=file:{self.home / f'log4j-{log4j}.properties'}"
        return [
            "java",
            *jvm_opts,
            "-Djava.awt.headless=true",
            logging_opt,
            "-cp",
            os.pathsep.join(str(p) for p in self.classpath),
            main_class,
            *args,
        ]

    def run_tool(
        self,
        main_class: str,
        args: Sequence[str],
        *,
        timeout_s: float = 120,
        stdin_text: str | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """Run one of Kafka's command-line tools to completion; raise :class:`ToolError` on failure."""
        return _run(
            self.java_argv(main_class, args),
            timeout_s=timeout_s,
            stdin_text=stdin_text,
            check=check,
        )

    def dump_log_segments(
        self, files: Sequence[Path], *options: str, timeout_s: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """``DumpLogSegments --files f1,f2,... options``; stdout and stderr are returned as text."""
        if not files:
            raise ValueError("no files to dump")
        args = ["--files", ",".join(str(Path(f).resolve()) for f in files), *options]
        return self.run_tool(DUMP_LOG_SEGMENTS, args, timeout_s=timeout_s)

    def format_storage(self, config_file: Path, cluster_id: str, *, timeout_s: float = 120) -> None:
        """``kafka-storage format``: write ``meta.properties`` and the bootstrap checkpoint.

        The id is passed as ``--cluster-id=<id>``: a base64 id may begin with ``-``,
        which the tool's argument parser would take for an option (1 start in 64).
        """
        self.run_tool(
            STORAGE_TOOL,
            ["format", f"--cluster-id={cluster_id}", "--config", str(config_file)],
            timeout_s=timeout_s,
        )


def new_cluster_id() -> str:
    """A cluster id as ``kafka-storage random-uuid`` prints it (URL-safe base64 of 16 bytes)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")

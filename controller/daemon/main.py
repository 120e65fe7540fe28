"""gflowd's command line: flags (generated from the config model), start-up checks (the spec
dir is safe, the backend can serve, one gflowd per home), then the loop until SIGTERM."""

from __future__ import annotations

import argparse
import errno
import fcntl
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any, NoReturn

from controller import __version__
from controller.act.runtime import start_problem
from controller.api.config_flags import FLAGS
from controller.api.settings import FlagError, flag_name, flag_overrides, plain_settings
from controller.daemon.service import VERBS
from controller.daemon.service import main as service_main
from controller.observe.gpus.guard import GuardedInventory
from controller.observe.gpus.inventory import FakeInventory, VendorInventory
from controller.observe.gpus.nvml import NvmlInventory
from controller.paths import Home
from controller.record.startup import forget_dashboard, note_dashboard, note_spec_dir, remove_dead_temps
from controller.sinks.hooks import SinkError, start_sinks
from controller.util.security import spec_dir_problem

log = logging.getLogger("gflowd")


class AlreadyRunning(Exception):
    pass


class InstanceLock:
    """An flock on ``run/gflowd.lock``: released by the kernel if gflowd dies, so never stale."""

    def __init__(self, path: Path):
        self.path = path
        self.fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise AlreadyRunning(holder) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def gpu_inventory(device_dir: str) -> Any:
    """NVML's GPUs and, where ``DEVICE_DIR/kfd`` says the machine has AMD GPUs, amdsmi's; each
    vendor's calls bounded in time (a hung driver must not stall the loop)."""
    nvidia = GuardedInventory(NvmlInventory)
    from controller.observe.gpus.amd import AmdInventory, amd_present  # lazy: its own module, cheap

    if not amd_present(device_dir):
        return nvidia
    return VendorInventory(nvidia, GuardedInventory(AmdInventory))


def _parse_gpus(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--gpus expects indices like 0,2, not {text!r}") from None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 1 (argparse's default is usage + exit 2)
        sys.stderr.write(f"gflowd: {message}\n")
        sys.exit(1)


def build_parser() -> argparse.ArgumentParser:
    """Every config.yaml key is also a flag (``allocationStrategy`` -> ``--allocation-strategy``),
    from the table generated from the config model (``config_flags.FLAGS``) so the two never drift."""
    parser = _Parser(
        prog="gflowd",
        description="Run the gflow controller in the foreground. "
        "`gflowd up` starts it in the background (logs in $GFLOW_HOME/gflowd.log), "
        "`gflowd status` shows it, `gflowd down` stops it (never the jobs).",
    )
    parser.add_argument("--home", help="state directory (default $GFLOW_HOME or ~/.local/share/gflow)")
    for path, help_text, kind, choices, *_ in FLAGS:  # structured settings (webhooks) live in config.yaml only
        kwargs: dict = {"dest": ".".join(path), "help": help_text, "type": _FLAG_TYPES.get(kind)}
        if len(path) > 1:
            kwargs["metavar"] = path[-1].upper()
        if choices is not None:
            kwargs["choices"] = list(choices)
        parser.add_argument(flag_name(path), **kwargs)
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--version", action="version", version=f"gflowd {__version__}")
    return parser


_FLAG_TYPES: dict[str, Any] = {  # duration, quantity, str: kept as text (settings.py or the model parse it)
    "gpus": _parse_gpus,
    "int": int,
    "list": lambda text: [x.strip() for x in text.split(",") if x.strip()],
}


def on_journal(stream: Any, env: dict[str, str] | None = None) -> bool:
    """True when ``stream`` is systemd's journal (sd_journal_stream_fd: JOURNAL_STREAM names its
    device and inode): the journal stamps each line with the time itself."""
    wanted = (os.environ if env is None else env).get("JOURNAL_STREAM", "")
    try:
        found = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return wanted == f"{found.st_dev}:{found.st_ino}"


class JournalFormatter(logging.Formatter):
    """``<4>WARNING message``: no timestamp (journald adds its own), and the syslog priority prefix
    journald reads, so ``journalctl -p warning -u gflowd`` shows gflowd's warnings and errors."""

    PRIORITY = {logging.CRITICAL: 2, logging.ERROR: 3, logging.WARNING: 4, logging.INFO: 6, logging.DEBUG: 7}

    def __init__(self) -> None:
        super().__init__("%(levelname)-7s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        priority = self.PRIORITY.get(record.levelno, 6)
        return "\n".join(f"<{priority}>{line}" for line in super().format(record).splitlines() or [""])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in VERBS:
        return service_main(argv)
    args = build_parser().parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JournalFormatter()
        if on_journal(sys.stderr)
        else logging.Formatter("%(asctime)s %(levelname)-7s %(message)s", "%H:%M:%S")
    )
    logging.basicConfig(level=getattr(logging, args.log_level.upper()), handlers=[handler])
    home = Home.resolve(args.home, None)
    flags = {path: getattr(args, ".".join(path)) for path, *_ in FLAGS}
    try:
        config: Any = plain_settings(home.config_file, flags)
    except FlagError as exc:
        sys.stderr.write(f"gflowd: {exc}\n")
        return 1
    if config is None:  # a config file or a flag the model checks
        from controller.api.config import ConfigError, load_config  # lazy: the config model (pydantic, ~0.1 s)

        try:
            config = load_config(home.config_file, flag_overrides(flags))
        except ConfigError as exc:
            sys.stderr.write(f"gflowd: {exc}\n")
            return 1
    home = Home.resolve(args.home, config.spec_dir)
    # state and logs are never world- or group-writable, whatever umask gflowd was started with
    # (jobs inherit it too, as from any daemon: systemd's default UMask is 0022 as well)
    os.umask(os.umask(0) | 0o022)
    try:
        home.ensure()
    except OSError as exc:
        sys.stderr.write(f"gflowd: cannot create {home.root}: {exc.strerror}\n")
        return 1
    problem = spec_dir_problem(home.spec_dir)
    if problem:
        sys.stderr.write(f"gflowd: {problem}\n")
        return 1
    if config.fake_gpus and not Path(config.fake_gpus).is_file():
        sys.stderr.write(f"gflowd: --fake-gpus: {config.fake_gpus} is not a file\n")
        return 1
    problem = start_problem(home, config)
    if problem is not None:
        sys.stderr.write(f"gflowd: {problem}\n")
        return 1
    lock = InstanceLock(home.lock_file)
    try:
        lock.acquire()
    except AlreadyRunning as exc:
        sys.stderr.write(
            f"gflowd: another gflowd (pid {exc}) is already running for {home.root}; stop it first or use --home\n"
        )
        return 1
    remove_dead_temps(home)
    web = None
    if config.web_port is not None:  # a thread serving the read-only dashboard from the state files
        # lazy: the dashboard (http.server, socketserver) only with --web-port
        from controller.web.server import DashboardError, start_dashboard

        try:
            web = start_dashboard(home, config.web_address, config.web_port)
        except DashboardError as exc:
            lock.release()
            sys.stderr.write(f"gflowd: {exc}\n")
            return 1
        note_dashboard(home, web.url, web.port, web.serves_socket)
    from controller.record.tighten import tighten_home  # lazy: gflowd --help and flag errors answer without it

    tighten_home(home)  # before anything reads them: what an older gflowd left open, closed
    note_spec_dir(home)
    # NVML calls are bounded in time (a hung driver must not stall the loop); the fake file needs no guard
    inventory = (
        FakeInventory(Path(config.fake_gpus).absolute(), home.node_file)
        if config.fake_gpus
        else gpu_inventory(config.device_dir)
    )
    try:
        sinks = start_sinks(home, config)
    except SinkError as exc:
        sys.stderr.write(f"gflowd: {exc}\n")
        if web is not None:
            web.stop()
            forget_dashboard(home)
        lock.release()
        return 1
    from controller.act.runtime.cgroups import CgroupError  # lazy, as the controller
    from controller.daemon.loop import Controller  # lazy: gflowd --help and flag errors answer without the controller

    try:
        controller = Controller(home, config, inventory, sinks=sinks)
    except CgroupError as exc:  # --cgroups required where they cannot be used: one line, why
        sys.stderr.write(f"gflowd: {exc}\n")
        sinks.close()
        if web is not None:
            web.stop()
            forget_dashboard(home)
        lock.release()
        return 1
    signal.signal(signal.SIGTERM, controller.request_stop)
    signal.signal(signal.SIGINT, controller.request_stop)
    log.info("gflowd %s: home %s, spec dir %s, GPUs: %s", __version__, home.root, home.spec_dir, inventory.describe())
    try:
        controller.run()
    finally:
        if web is not None:
            web.stop()
            forget_dashboard(home)
        getattr(inventory, "close", lambda: None)()
        sinks.close()
        lock.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())

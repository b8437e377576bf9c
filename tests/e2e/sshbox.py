"""A real OpenSSH server on a loopback port, standing in for a GPU box in tests.

It runs as the current user with its own host key, accepts only the box key, and puts a fake
`nvidia-smi` (tests/fixtures/nvidia-smi/fake_nvidia_smi.py, answering from captured outputs)
first on the remote PATH through `environment=` in authorized_keys. An ssh_config maps a
made-up host name to it, the way users reach real boxes through their own ssh_config.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.ports import free_port, listens

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvidia-smi"
SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if Path("/usr/sbin/sshd").exists() else None)
SSH = shutil.which("ssh")
SSH_KEYGEN = shutil.which("ssh-keygen")
HOST_ALIAS = "box-under-test"


def prerequisites() -> str | None:
    """None when a real sshd can run here, else what is missing."""
    missing = [n for n, p in (("sshd", SSHD), ("ssh", SSH), ("ssh-keygen", SSH_KEYGEN)) if not p]
    return f"OpenSSH ({', '.join(missing)}) not installed" if missing else None


PORT_ATTEMPTS = 5


class PortTaken(RuntimeError):
    """sshd could not bind its port: something else took it after it was picked."""


def keygen(path: Path) -> None:
    subprocess.run(
        [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", "orch-test", "-f", str(path)],
        check=True,
    )
    path.chmod(0o600)


def write_fake_nvidia_smi(bin_dir: Path) -> Path:
    """Install the fake nvidia-smi under `bin_dir`, run by this interpreter."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    target = bin_dir / "nvidia-smi"
    source = (FIXTURES / "fake_nvidia_smi.py").read_text()
    target.write_text(f"#!{sys.executable}\n{source}")
    target.chmod(0o755)
    return target


@dataclass
class SshBox:
    root: Path
    port: int
    key_path: Path
    ssh_config: Path
    bin_dir: Path
    state_dir: Path
    user: str
    proc: subprocess.Popen | None = None
    host: str = HOST_ALIAS
    generation: int = field(default=0)

    # -------------------------------------------------------------- what nvidia-smi says

    def serve(self, fixture: str) -> None:
        """Make the fake nvidia-smi print tests/fixtures/nvidia-smi/<fixture>.csv."""
        self._reset()
        (self.state_dir / "fixture").write_text(str(FIXTURES / f"{fixture}.csv"))

    def serve_sequence(self, path: Path) -> None:
        self._reset()
        (self.state_dir / "sequence").write_text(str(path))

    def fail(self, exit_code: int, message: str) -> None:
        self._reset()
        (self.state_dir / "fail").write_text(f"{exit_code}\n{message}")

    def serve_raw(self, data: bytes) -> None:
        """Make the fake nvidia-smi print exactly `data`, whatever it is asked."""
        self._reset()
        path = self.state_dir / "raw.bin"
        path.write_bytes(data)
        (self.state_dir / "raw").write_text(str(path))

    def serve_text(self, fixture: str, text: str) -> None:
        """Serve a crafted capture: `text` is a CSV with a header line, as the fixtures are."""
        self._reset()
        path = self.state_dir / f"{fixture}.csv"
        path.write_text(text)
        (self.state_dir / "fixture").write_text(str(path))

    def hang(self, seconds: float) -> None:
        """Make the fake nvidia-smi sleep before it answers (it keeps serving what it served)."""
        (self.state_dir / "hang").write_text(str(seconds))

    def hung_pid(self) -> int | None:
        path = self.state_dir / "hang.pid"
        return int(path.read_text()) if path.exists() else None

    def remove_driver(self) -> None:
        (self.bin_dir / "nvidia-smi").unlink(missing_ok=True)

    def calls(self) -> list[str]:
        log = self.state_dir / "argv.log"
        return log.read_text().splitlines() if log.exists() else []

    def _reset(self) -> None:
        for name in ("fixture", "sequence", "fail", "calls", "argv.log", "raw", "hang", "hang.pid"):
            (self.state_dir / name).unlink(missing_ok=True)
        if not (self.bin_dir / "nvidia-smi").exists():
            write_fake_nvidia_smi(self.bin_dir)

    # ---------------------------------------------------------------------- the server

    def start(self, *, new_host_key: bool = False) -> None:
        host_key = self.root / "ssh_host_ed25519_key"
        if new_host_key or not host_key.exists():
            for path in (host_key, host_key.with_suffix(".pub")):
                path.unlink(missing_ok=True)
            keygen(host_key)
        config = self.root / "sshd_config"
        lines = [
            f"Port {self.port}",
            "ListenAddress 127.0.0.1",
            f"HostKey {host_key}",
            f"PidFile {self.root / 'sshd.pid'}",
            f"AuthorizedKeysFile {self.root / 'authorized_keys'}",
            "StrictModes no",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "PermitUserEnvironment yes",
            "PermitRootLogin prohibit-password",
            f"AllowUsers {self.user}",
            "LogLevel ERROR",
        ]
        config.write_text("\n".join(lines) + "\n")
        if os.geteuid() == 0:
            # sshd started as root insists on its privilege-separation directory.
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        log_path = self.root / "sshd.log"
        logged_before = log_path.stat().st_size if log_path.exists() else 0
        with log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(config)],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        self._wait_listening(logged_before)

    def _wait_listening(self, logged_before: int, timeout: float = 60) -> None:
        """Until this sshd is the one listening on its port (tests/ports.py: a check that
        only connects could reach another worker's server there)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc and self.proc.poll() is not None:
                log = (self.root / "sshd.log").read_bytes()[logged_before:].decode(errors="replace")
                if "Address already in use" in log:  # sshd.c: "Bind to port %s on %s failed"
                    raise PortTaken(f"sshd: port {self.port} is taken")
                raise RuntimeError(f"sshd exited: {log[-2000:]}")
            if self.proc and listens(self.proc.pid, self.port):
                return
            time.sleep(0.05)
        raise RuntimeError("sshd did not start listening")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def make_sshbox(root: Path, *, start: bool = True, port: int | None = None) -> SshBox:
    """Prepare (and by default start) an sshd under `root` (a fresh temporary folder).

    `port`: for a box that never starts, the port it names, held by the caller
    (tests/ports.py's refused_port) so that nothing else can listen there meanwhile; a port
    picked free and let go could be taken by another worker's server."""
    assert port is None or not start, "a box that starts picks its own port"
    root.mkdir(parents=True, exist_ok=True)
    key = root / "id_ed25519"
    keygen(key)
    bin_dir, state_dir = root / "bin", root / "state"
    state_dir.mkdir()
    write_fake_nvidia_smi(bin_dir)
    path = f"{bin_dir}:/usr/local/bin:/usr/bin:/bin"
    options = f'environment="PATH={path}",environment="FAKE_NVIDIA_SMI_STATE={state_dir}"'
    (root / "authorized_keys").write_text(f"{options} {key.with_suffix('.pub').read_text()}")
    import getpass

    box = SshBox(root, 0, key, root / "ssh_config", bin_dir, state_dir, getpass.getuser())
    for attempt in range(1, PORT_ATTEMPTS + 1):
        box.port = free_port() if port is None else port
        box.ssh_config.write_text(f"Host {HOST_ALIAS}\n  HostName 127.0.0.1\n  Port {box.port}\n")
        if not start:
            break
        try:
            box.start()
            break
        except PortTaken:
            if attempt == PORT_ATTEMPTS:
                raise
    return box


def set_box_environment(box: SshBox, home: Path, extra: dict[str, str] | None = None) -> None:
    """Give the box's logins a HOME of their own (the box's disk: `orch run` works under it)
    and extra environment (what a real box has from its instance role, its image's PATH).

    sshd applies authorized_keys `environment=` after its own defaults, HOME included
    (sshd(8), AUTHORIZED_KEYS FILE FORMAT; PermitUserEnvironment is on)."""
    home.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": f"{box.bin_dir}:{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "FAKE_NVIDIA_SMI_STATE": str(box.state_dir),
        "HOME": str(home),
        **(extra or {}),
    }
    for key, value in env.items():
        if '"' in value or "\n" in value:
            raise ValueError(f"{key} cannot go into authorized_keys: {value!r}")
    options = ",".join(f'environment="{key}={value}"' for key, value in env.items())
    (box.root / "authorized_keys").write_text(
        f"{options} {box.key_path.with_suffix('.pub').read_text()}"
    )


def processes_of(home: Path) -> list[int]:
    """Every process of the loopback "machine" whose disk is `home`: whatever its sshd started
    has HOME=home (set_box_environment), torchrun's workers too, though they run in a
    session of their own (torch's SubprocessHandler: start_new_session), out of reach of a
    kill of the wrapper's process group."""
    mine = f"HOME={home}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
            except OSError:  # gone meanwhile
                continue
            if mine in environ:
                found.append(int(entry.name))
    return found


def route_every_host(box: SshBox, path: Path) -> Path:
    """An ssh_config sending every host to this sshd, offering the test key after the box's
    own: any address moto gives an instance reaches this one "box"."""
    path.write_text(
        f"Host *\n  HostName 127.0.0.1\n  Port {box.port}\n  IdentityFile {box.key_path}\n"
    )
    return path


class KeyRouter:
    """Authorize each box's own key on this sshd as soon as orch writes it, with a HOME of the
    box's own: many boxes (a pool) on one sshd, each with its own disk, reached with its own
    key as on real instances. A thread watches ORCH_HOME/boxes/*/id_ed25519.pub."""

    def __init__(self, box: SshBox, orch_home: Path, homes: Path):
        import threading

        self.box, self.orch_home, self.homes = box, orch_home, homes
        self.known: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def home_of(self, box_name: str) -> Path:
        return self.homes / box_name

    def __enter__(self) -> KeyRouter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(0.1):
            changed = False
            for pub in sorted((self.orch_home / "boxes").glob("*/id_ed25519.pub")):
                try:
                    key = pub.read_text().strip()
                except FileNotFoundError:  # its box was destroyed since the glob: skip it
                    continue
                if key and self.known.get(pub.parent.name) != key:
                    self.known[pub.parent.name] = key
                    changed = True
            if changed:
                self._write()

    def _write(self) -> None:
        lines = []
        path = f"{self.box.bin_dir}:{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"
        for name, key in sorted(self.known.items()):
            home = self.home_of(name)
            home.mkdir(parents=True, exist_ok=True)
            env = {
                "PATH": path,
                "FAKE_NVIDIA_SMI_STATE": str(self.box.state_dir),
                "HOME": str(home),
            }
            options = ",".join(f'environment="{k}={v}"' for k, v in env.items())
            lines.append(f"{options} {key}\n")
        tmp = self.box.root / "authorized_keys.tmp"
        tmp.write_text("".join(lines))
        os.replace(tmp, self.box.root / "authorized_keys")


def route_to(box: SshBox, path: Path) -> Path:
    """An ssh_config sending every host to this sshd, with no key of its own: each box's key
    must be the one that gets in (see KeyRouter)."""
    path.write_text(f"Host *\n  HostName 127.0.0.1\n  Port {box.port}\n")
    return path

"""A throwaway SLURM cluster on this machine: one ``slurmctld`` and 1-N ``slurmd`` daemons
(one per node, all on this host, each on a port of its own) authenticated by a ``munged`` of
their own, every file in one folder. For trying ``fairseq-ln-submit`` and the ``--dry-run``
sbatch scripts before a real cluster, and for the tests that submit to a real SLURM.

Needs Debian's ``slurmctld slurmd slurm-client munge`` (SLURM 22.05 tested) and root (slurmd
starts jobs as their user). Nothing outside the folder is read or written: the commands find
the cluster through ``SLURM_CONF`` (:attr:`LocalCluster.env`, or ``source FOLDER/env.sh``),
and :meth:`stop` ends exactly the daemons this folder's pid files name. Nodes get ``CPUs`` =
this machine's cores (they share them) and optionally ``gpus`` fake GPUs each (GRES backed by
empty files: jobs can ask for ``--gpus-per-node``, nothing sees a device). Accounting is off,
so ``sacct`` has nothing to say (submitit then reports a job's state as UNKNOWN; its results
still come back). A requeued job starts again within seconds (short credential expiry and
scheduling interval).
"""

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from fairseq_layernorm_plugins.atomic import write_text

COMMANDS = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo", "squeue", "scontrol", "scancel")
CONF = """\
ClusterName=fsln-local
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/munge.socket,cred_expire=5
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool/%n
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.%n.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
GresTypes=gpu
{nodes}
PartitionName=local Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def missing_commands():
    """The SLURM / munge programs this machine lacks (empty when a local cluster can start)."""
    return [name for name in COMMANDS if shutil.which(name) is None]


def free_ports(count):
    """``count`` TCP ports free on this host now."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def running(pid):
    """Whether process ``pid`` still runs (an unreaped zombie has exited)."""
    return _signal(pid, 0)


def _signal(pid, signum):
    """Send ``signum`` to ``pid``; False when it has exited (a zombie, left unreaped where
    nothing reaps orphans, has exited too)."""
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


class LocalCluster:
    """``LocalCluster(folder, nodes=2, gpus=1)``: nodes ``n1..nN`` in partition ``local``;
    ``start()`` returns when ``sinfo`` shows every node idle; ``stop()`` (or leaving a
    ``with`` block) ends the daemons. The folder (created if absent) must be short: the munge
    socket's path has to fit a Unix socket name (about 100 characters)."""

    def __init__(self, folder, nodes=1, gpus=0):
        self.dir = Path(folder).absolute()
        self.nodes, self.gpus = nodes, gpus
        if len(str(self.dir / "munge.socket")) > 100:
            raise ValueError(f"{self.dir}: too long a path for the munge socket; use a short folder such as /tmp/slurm")
        self.env = {**os.environ, "SLURM_CONF": str(self.dir / "slurm.conf")}

    @property
    def node_names(self):
        return [f"n{i + 1}" for i in range(self.nodes)]

    def write_config(self):
        """slurm.conf, gres.conf, the munge key and ``env.sh``, in the folder."""
        for sub in ("state", "spool", "dev"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        ctld_port, *node_ports = free_ports(1 + self.nodes)
        host, cpus = socket.gethostname(), os.cpu_count()
        gres = f" Gres=gpu:{self.gpus}" if self.gpus else ""
        nodes = "\n".join(
            f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} CPUs={cpus}{gres}"
            for name, port in zip(self.node_names, node_ports)
        )
        write_text(self.dir / "slurm.conf", CONF.format(host=host, ctld_port=ctld_port, dir=self.dir, nodes=nodes))
        devices = [self.dir / "dev" / f"gpu{i}" for i in range(self.gpus)]
        for device in devices:
            device.touch()
        files = ",".join(map(str, devices))
        write_text(
            self.dir / "gres.conf", f"NodeName={','.join(self.node_names)} Name=gpu File={files}\n" * bool(files)
        )
        key = self.dir / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
            key.chmod(0o400)
        write_text(self.dir / "env.sh", f"export SLURM_CONF={self.dir / 'slurm.conf'}\n")

    def _run(self, *cmd):
        return subprocess.run(cmd, env=self.env, check=True, capture_output=True, text=True).stdout

    def start(self, timeout=60):
        """Write the configuration, start munged, slurmctld and one slurmd per node (each
        daemonizes and writes its pid file here) and wait until every node is idle."""
        if self.pids():
            raise RuntimeError(f"{self.dir}: a cluster is already running here (stop it first)")
        self.write_config()
        d = self.dir
        self._run(
            "munged", f"--socket={d}/munge.socket", f"--key-file={d}/munge.key", f"--pid-file={d}/munged.pid",
            f"--log-file={d}/munged.log", f"--seed-file={d}/munged.seed", "--force",
        )  # fmt: skip
        self._run("slurmctld", "-f", str(d / "slurm.conf"))
        for name in self.node_names:
            self._run("slurmd", "-N", name, "-f", str(d / "slurm.conf"))
        deadline = time.monotonic() + timeout
        while True:
            states = subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], env=self.env, capture_output=True, text=True)
            if states.returncode == 0 and states.stdout.split() == ["idle"] * self.nodes:
                return self
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{d}: the nodes are not idle after {timeout} s; see {d}/slurmctld.log")
            time.sleep(0.2)

    def pids(self):
        """{pid file: pid} of this folder's daemons still running: a pid file's process whose
        command line names this folder (a stale file's pid may belong to another process now)."""
        running = {}
        for path in sorted(self.dir.glob("*.pid")):
            try:
                pid = int(path.read_text().split()[0])
                ours = str(self.dir).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
            except (ValueError, IndexError, OSError):
                continue
            if ours and _signal(pid, 0):
                running[path.name] = pid
        return running

    def stop(self, timeout=30):
        """Cancel the jobs still queued or running and wait for them to leave the queue, then
        SIGTERM the daemons this folder's pid files name (the slurmds, then slurmctld and
        munged) and wait for them to exit."""
        running = self.pids()
        if "slurmctld.pid" in running:  # jobs first: a slurmd stopped under a running job leaves its slurmstepd behind
            self._cancel_jobs(timeout)
        groups = [
            [pid for name, pid in running.items() if name.startswith("slurmd.")],
            [pid for name, pid in running.items() if not name.startswith("slurmd.")],
        ]
        for group in groups:
            for pid in group:
                _signal(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while any(_signal(pid, 0) for pid in group) and time.monotonic() < deadline:
                time.sleep(0.05)
            for pid in group:
                _signal(pid, signal.SIGKILL)

    def _cancel_jobs(self, timeout):
        def queue():
            listed = subprocess.run(["squeue", "-h", "-o", "%i"], env=self.env, capture_output=True, text=True)
            return listed.stdout.split() if listed.returncode == 0 else []

        jobs = queue()
        if jobs:
            subprocess.run(["scancel", *jobs], env=self.env, capture_output=True)
        deadline = time.monotonic() + timeout
        while jobs and time.monotonic() < deadline:
            time.sleep(0.2)
            jobs = queue()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

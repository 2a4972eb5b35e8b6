"""A returning host's process started ahead of the workers' reset (scripts/horovod/join_ahead.patch,
comm/joining.py): Horovod's own elastic driver, rendezvous server and notification services on
loopback, with threads in place of the worker processes, each doing over HTTP what a rank does (ask
for its slot, register its notification service, and at a reset ask rank_and_size as Gloo's init does).
"""
import http.server
import threading
import time
import urllib.request

import pytest

from comm import joining

driver_lib = pytest.importorskip("horovod.runner.elastic.driver")
from horovod.runner import gloo_run  # noqa: E402
from horovod.runner.common.util import hosts as hosts_lib  # noqa: E402
from horovod.runner.elastic.discovery import HostDiscovery  # noqa: E402
from horovod.runner.elastic.rendezvous import create_rendezvous_handler  # noqa: E402
from horovod.runner.elastic.worker import HostUpdateResult, WorkerNotificationManager  # noqa: E402
from horovod.runner.http.http_server import RendezvousServer  # noqa: E402

BOUND_S = 20  # every wait here is bounded; the steps themselves take milliseconds


def _slot_env(port, host="h2", local_rank="0"):
  return {joining.AHEAD: "1", "HOROVOD_HOSTNAME": host, "HOROVOD_LOCAL_RANK": local_rank, "HOROVOD_RANK": "1",
          "HOROVOD_SIZE": "2", "HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1", "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port)}


class _Answers(http.server.BaseHTTPRequestHandler):
  answer = b""

  def do_GET(self):  # noqa: N802  (http.server's name)
    self.server.asked.append(self.path)
    self.send_response(200)
    self.send_header("Content-Length", str(len(self.answer)))
    self.end_headers()
    self.wfile.write(self.answer)

  def log_message(self, *args):
    pass


@pytest.fixture
def answering():
  """A loopback server answering every GET with answer(bytes); yields (set_answer, port, paths asked)."""
  server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type("Answers", (_Answers,), {}))
  server.asked = []
  thread = threading.Thread(target=server.serve_forever, daemon=True)
  thread.start()
  try:
    yield (lambda answer: setattr(server.RequestHandlerClass, "answer", answer)), server.server_address[1], server.asked
  finally:
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("answer, rank, size, local_size, cross_rank, cross_size", [
    (b"1,2,0,1,1,2", "1", "2", "1", "1", "2"),  # a second host of one slot
    (b"3,4,1,2,1,2", "3", "4", "2", "1", "2"),  # the second slot of a second host of two
])
def test_a_rank_started_ahead_takes_the_slot_the_driver_answers(answering, capsys, answer, rank, size, local_size,
                                                                 cross_rank, cross_size):
  set_answer, port, asked = answering
  set_answer(answer)
  env = _slot_env(port, local_rank=answer.split(b",")[2].decode())
  assert joining.take_slot(env, wait_s=BOUND_S)
  assert asked == [f"/join_slot/h2:{env['HOROVOD_LOCAL_RANK']}"]
  assert (env["HOROVOD_RANK"], env["HOROVOD_SIZE"], env["HOROVOD_LOCAL_SIZE"], env["HOROVOD_CROSS_RANK"],
          env["HOROVOD_CROSS_SIZE"]) == (rank, size, local_size, cross_rank, cross_size)
  assert joining.AHEAD not in env  # joined: a later init is a reset
  assert f"joining: h2[{env['HOROVOD_LOCAL_RANK']}] was started ahead of its world; rank {rank} of {size}" in \
      capsys.readouterr().err


def test_a_rank_not_started_ahead_asks_nothing(answering):
  _, port, asked = answering
  env = dict(_slot_env(port), **{joining.AHEAD: "0"})
  assert not joining.take_slot(env) and env == dict(_slot_env(port), **{joining.AHEAD: "0"}) and asked == []


def test_a_rank_whose_host_left_before_its_world_formed_is_told_so(answering):
  set_answer, port, _ = answering
  set_answer(b"-1,-1,-1,-1,-1,-1")  # INVALID_SLOT_INFO
  with pytest.raises(joining.RemovedBeforeJoining, match="h2.0. was started ahead of its world but its host left"):
    joining.take_slot(_slot_env(port), wait_s=BOUND_S)


def test_an_unpatched_driver_is_named(answering):
  set_answer, port, _ = answering
  set_answer(b"")  # an unpatched rendezvous server has no join_slot scope (its empty cache answers nothing)
  with pytest.raises(RuntimeError, match="not a slot: is its Horovod patched"):
    joining.take_slot(_slot_env(port), wait_s=BOUND_S)


def test_gloo_run_marks_a_process_started_ahead():
  slot = hosts_lib.SlotInfo(hostname="h2", rank=1, local_rank=0, cross_rank=1, size=2, local_size=1, cross_size=2)
  to_command = gloo_run._slot_info_to_command_fn("python train.py", {})
  assert f"{joining.AHEAD}=1" in to_command(slot, ahead=True)
  assert joining.AHEAD not in to_command(slot)


class _Hosts(HostDiscovery):
  def __init__(self, found):
    super().__init__()
    self.found = dict(found)

  def find_available_hosts_and_slots(self):
    return dict(self.found)


class _Cluster:
  """The real driver and rendezvous server; create() stands for a worker process: a rank started ahead
  waits for its start-up gate, then takes its slot (comm/joining.py), and every rank registers its
  notification service and waits for the job's end (the driver's shutdown event)."""

  def __init__(self, found):
    self.hosts = _Hosts(found)
    self.server = RendezvousServer()
    self.driver = driver_lib.ElasticDriver(self.server, self.hosts, min_num_proc=1, max_num_proc=4)
    self.port = self.server.start(create_rendezvous_handler(self.driver))
    self.started, self.slots, self.removed, self.told, self.threads = [], {}, [], [], []
    self.gate, self.told_event = threading.Event(), threading.Event()
    self.startup_s = BOUND_S  # a rank started ahead whose gate stays shut this long dies in its start-up

  def create(self, slot_info, events, ahead=False):
    host, local_rank = slot_info.hostname, slot_info.local_rank
    self.started.append((host, ahead))
    self.threads.append(threading.current_thread())
    if ahead:
      if not self.gate.wait(self.startup_s):  # its imports
        return 1, time.time()
      env = _slot_env(self.port, host, str(local_rank))
      try:
        joining.take_slot(env, wait_s=BOUND_S)
      except joining.RemovedBeforeJoining:
        self.removed.append(host)
        return 0, time.time()
      self.slots[host] = env["HOROVOD_RANK"], env["HOROVOD_SIZE"]
    manager = WorkerNotificationManager()
    manager.init(rendezvous_addr="127.0.0.1", rendezvous_port=self.port, nic="lo", hostname=host,
                 local_rank=local_rank)
    manager.register_listener(self)
    events[0].wait(BOUND_S)  # the driver's shutdown
    return 0, time.time()

  def on_hosts_updated(self, timestamp, update_res):
    self.told.append(update_res)
    self.told_event.set()

  def reset(self, host="h1"):
    """What a worker's reset asks (horovod/common/gloo/gloo_context.cc): its slot in the new world."""
    with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/rank_and_size/{host}:0", timeout=BOUND_S) as r:
      return r.read().decode()

  def until(self, condition, what):
    deadline = time.time() + BOUND_S
    while not condition():
      assert time.time() < deadline, f"not within {BOUND_S} s: {what}"
      time.sleep(0.02)

  def registered(self, host):
    """Whether host's rank holds a slot and registered its notification service (as after its init)."""
    return self.driver.get_worker_client(self.driver.get_slot_info(host, 0)) is not None

  def close(self):
    self.gate.set()
    self.driver.stop()
    for thread in self.threads:  # each ends at the driver's shutdown event
      thread.join(BOUND_S)
      assert not thread.is_alive(), "a worker thread outlived the driver's stop"


@pytest.fixture
def cluster(monkeypatch):
  if not hasattr(driver_lib, "JOIN_AHEAD_WAIT_SECS"):
    pytest.fail("the installed Horovod lacks scripts/horovod/join_ahead.patch: run make setup")
  monkeypatch.setattr(driver_lib, "DISCOVER_HOSTS_FREQUENCY_SECS", 0.05)
  monkeypatch.delenv("HOROVOD_JOIN_AHEAD", raising=False)
  made = []

  def make(found=(("h1", 1),)):
    made.append(c := _Cluster(dict(found)))
    c.driver.start(1, c.create)
    c.until(lambda: c.registered("h1"), "h1 registered")
    return c
  yield make
  for c in made:
    c.close()


def test_a_returning_host_is_started_ahead_and_the_workers_told_once_it_asks_for_its_slot(cluster):
  c = cluster()
  c.hosts.found["h2"] = 1
  c.until(lambda: ("h2", True) in c.started, "h2 started ahead")
  time.sleep(0.5)  # ten discovery rounds: the workers are not told while h2 starts up
  assert c.told == []
  c.gate.set()
  assert c.told_event.wait(BOUND_S) and c.told == [HostUpdateResult.added]
  assert c.reset() == "0,2,0,1,0,2"  # the reset: h1 rank 0 of 2, and h2 adopted, not started again
  c.until(lambda: c.registered("h2"), "h2 took its slot and registered")
  assert c.slots["h2"] == ("1", "2") and c.started == [("h1", False), ("h2", True)]


def test_a_host_that_leaves_before_its_process_joined_is_never_told(cluster):
  c = cluster()
  c.hosts.found["h2"] = 1
  c.until(lambda: ("h2", True) in c.started, "h2 started ahead")
  del c.hosts.found["h2"]
  time.sleep(0.3)
  c.gate.set()
  c.until(lambda: c.removed == ["h2"], "h2 answered: not in the world")
  time.sleep(0.3)
  assert c.told == [] and c.started == [("h1", False), ("h2", True)]


def test_a_process_started_ahead_that_dies_lets_the_workers_reset_start_it_anew(cluster):
  c = cluster()
  c.startup_s = 0.5  # its gate stays shut: it exits 1 in its start-up, never having asked
  c.hosts.found["h2"] = 1
  assert c.told_event.wait(BOUND_S) and c.told == [HostUpdateResult.added]
  assert c.reset() == "0,2,0,1,0,2"
  c.until(lambda: ("h2", False) in c.started and c.registered("h2"), "h2 started at the reset, as without it")


def test_a_process_that_never_asks_joins_after_the_wait(cluster, monkeypatch):
  monkeypatch.setattr(driver_lib, "JOIN_AHEAD_WAIT_SECS", 0.3)
  c = cluster()
  c.hosts.found["h2"] = 1  # its gate stays shut: a script unaware of join_slot
  assert c.told_event.wait(BOUND_S) and c.told == [HostUpdateResult.added]
  assert c.reset() == "0,2,0,1,0,2"
  c.gate.set()  # asking late, it is answered at once
  c.until(lambda: c.registered("h2"), "h2 took its slot and registered")
  assert c.slots["h2"] == ("1", "2") and c.started == [("h1", False), ("h2", True)]


def test_join_ahead_off_tells_the_workers_at_once(cluster, monkeypatch):
  monkeypatch.setenv("HOROVOD_JOIN_AHEAD", "0")
  c = cluster()
  c.hosts.found["h2"] = 1
  assert c.told_event.wait(BOUND_S) and c.told == [HostUpdateResult.added]
  assert c.reset() == "0,2,0,1,0,2"
  c.until(lambda: ("h2", False) in c.started and c.registered("h2"), "h2 started at the reset")

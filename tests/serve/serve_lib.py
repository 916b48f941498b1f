"""What the Python tests of weft serve share (hostile_clients.py, lifecycle.py): a tiny GPT
trained for them, a server started on a free port, and reading raw HTTP from a socket."""
import atexit
import os
import subprocess
import sys
import time


def _stop_at_exit(p):
    """A server a failing test left running is stopped when the test ends (SIGTERM: a front end
    stops its replicas; SIGKILL after 15 s)."""
    def stop():
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
    atexit.register(stop)


def train_tiny_gpt(weft, work):
    """A GPT of 2 layers, d 32, context 32 after 2 steps: its path."""
    model = os.path.join(work, "gpt.safetensors")
    subprocess.run([weft, "train", "--model", "gpt", "--layers", "2", "--d-model", "32", "--heads", "4", "--context",
                    "32", "--batch", "8", "--max-steps", "2", "--eval-every", "2", "--eval-batches", "1", "--sample", "0",
                    "--quiet", "--threads", "1", "--save-model", model], check=True, stdout=subprocess.DEVNULL)
    return model


def start_server(weft, model, work, *flags):
    """weft serve MODEL on a free port with FLAGS: (the process, its port); ends the test if it
    does not start within 60 s."""
    port_file = os.path.join(work, "port")
    if os.path.exists(port_file):
        os.remove(port_file)
    p = subprocess.Popen([weft, "serve", model, "--port", "0", "--port-file", port_file, *flags],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _stop_at_exit(p)
    deadline = time.time() + 60
    while not os.path.exists(port_file):
        if p.poll() is not None or time.time() > deadline:
            sys.exit("FAIL: the server did not start: " + p.stderr.read().decode())
        time.sleep(0.05)
    return p, int(open(port_file).read())


def read_until(sock, done=lambda got: False):
    """Bytes from `sock` until done(bytes so far) or the server closes."""
    got = b""
    while not done(got):
        more = sock.recv(65536)
        if not more:
            break
        got += more
    return got


def metric_in(text, name):
    """The sum of a metric's samples in a Prometheus text."""
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith(name + " ") or line.startswith(name + "{"))

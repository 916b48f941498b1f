"""usage: lifecycle.py WEFT

weft serve's life cycle (docs/serving.md, "Stopping"), one process and a front end with 2
replicas:
  1. a client that leaves a completion that is not streamed cancels its generation: the
     sequence leaves the batch and no more tokens are generated;
  2. SIGTERM with --drain-seconds 30: new connections are refused, the stream in flight ends
     as it would have (finish_reason "length", [DONE]), and the server exits right after;
  3. SIGTERM with --drain-seconds 0.5 and a long stream: the stream ends whole after the
     drain, with a last chunk of finish_reason "abort" and [DONE], and the server exits;
  4. closed-loop clients exactly as many as --max-concurrency: none is refused (429); /metrics
     (the front end's: its replicas' summed) counts their tokens and times to first token;
  5. --request-timeout 0.5: a completion of 200000 tokens, whole or streamed, ends soon after
     with its text so far (finish_reason "abort").
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_lib import metric_in, read_until, start_server, train_tiny_gpt  # noqa: E402

weft = sys.argv[1]
work = tempfile.mkdtemp()
model = train_tiny_gpt(weft, work)


def start(*flags):
    return start_server(weft, model, work, "--max-tokens", "200000", *flags)


def send(port, body):
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
              str(len(data)).encode() + b"\r\n\r\n" + data)
    return s


def metric(port, name):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    text = read_until(s)
    s.close()
    return metric_in(text.decode(), name)


def read_stream(s, done=lambda got: False):
    """The data of each event until `done` or the server closes the connection."""
    got = read_until(s, done)
    return [line[6:] for line in got.decode(errors="replace").split("\n") if line.startswith("data: ")]


def read_body(s):
    """The body of a response with a Content-Length."""
    got = read_until(s, lambda g: b"\r\n\r\n" in g)
    head, _, body = got.partition(b"\r\n\r\n")
    length = int([line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")][0])
    return body + read_until(s, lambda g: len(body) + len(g) >= length)


def stop(p, drain_limit):
    t = time.time()
    try:
        p.wait(timeout=drain_limit)
    except subprocess.TimeoutExpired:
        p.kill()
        sys.exit(f"FAIL: the server did not exit within {drain_limit} s of SIGTERM")
    assert p.returncode == 0, p.returncode
    return time.time() - t


for label, flags in (("one process", ["--max-concurrency", "4"]), ("2 replicas", ["--replicas", "2", "--max-concurrency", "4"])):
    # 1. A client that leaves a completion that is not streamed.
    p, port = start(*flags)
    if label == "one process":
        s = send(port, {"prompt": "The", "max_tokens": 200000})
        deadline = time.time() + 10
        while metric(port, "weft_running_sequences") < 1:
            assert time.time() < deadline, "the completion never started"
            time.sleep(0.05)
        s.close()
        deadline = time.time() + 5
        while metric(port, "weft_running_sequences") > 0 or metric(port, "weft_requests_in_flight") > 0:
            assert time.time() < deadline, "the generation of a client that left goes on"
            time.sleep(0.05)
        tokens = metric(port, "weft_generated_tokens_total")
        time.sleep(0.3)
        assert metric(port, "weft_generated_tokens_total") == tokens, "tokens are still generated"
        assert tokens < 200000, tokens
        print(f"{label}: a client that left its completion (not streamed) cancelled it after {tokens:.0f} tokens")
    else:
        # Through the front end: the replica that generated stops computing (its CPU time stays put).
        def replicas_cpu_seconds():
            total = 0.0
            for task in os.listdir(f"/proc/{p.pid}/task"):
                for child in open(f"/proc/{p.pid}/task/{task}/children").read().split():
                    fields = open(f"/proc/{child}/stat").read().rsplit(")", 1)[1].split()
                    total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            return total
        s = send(port, {"prompt": "The", "max_tokens": 200000})
        time.sleep(0.5)
        # Generating: the replicas' CPU time grows (by 0.2 s, however busy the machine is).
        cpu_start, deadline = replicas_cpu_seconds(), time.time() + 20
        while replicas_cpu_seconds() - cpu_start < 0.2:
            assert time.time() < deadline, "the replica does not generate"
            time.sleep(0.1)
        busy = replicas_cpu_seconds() - cpu_start
        s.close()
        time.sleep(0.3)
        after = replicas_cpu_seconds()
        time.sleep(0.5)
        after = replicas_cpu_seconds() - after
        assert after < 0.1, (busy, after)
        print(f"{label}: a client that left its completion (not streamed) cancelled it: the replicas computed "
              f"{busy:.2f} s while it waited, {after:.2f} s in 0.5 s after")

    # 4. As many closed-loop clients as the limit: a client's next request never finds its
    # last one still counted.
    bench = subprocess.run([weft, "serve-bench", "--url", f"http://127.0.0.1:{port}", "--concurrency", "4",
                            "--requests", "200", "--max-tokens", "4", "--json"], capture_output=True, text=True)
    assert bench.returncode == 0, bench.stderr
    errors = json.loads(bench.stdout.strip().splitlines()[-1])["errors"]
    assert errors == 0, f"{errors} of 200 requests refused with 4 clients at --max-concurrency 4: {bench.stdout}"
    print(f"{label}: 4 closed-loop clients at --max-concurrency 4: 200 streamed requests, none refused")
    # The front end's /metrics shows the replicas' figures (scraped every second).
    deadline = time.time() + 5
    while metric(port, "weft_time_to_first_token_seconds_count") < 204:
        assert time.time() < deadline, "the /metrics of the server lacks the completions' figures"
        time.sleep(0.2)
    tokens = metric(port, "weft_generated_tokens_total")
    assert tokens >= 204 * 4 and metric(port, "weft_batch_size_count") > 0, tokens
    print(f"{label}: /metrics: {tokens:.0f} tokens generated, "
          f"{metric(port, 'weft_time_to_first_token_seconds_count'):.0f} times to first token")

    # 2. SIGTERM with time to drain: the stream in flight ends as it would have.
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=30)
    p, port = start(*flags, "--drain-seconds", "30")
    s = send(port, {"prompt": "The", "max_tokens": 3000, "stream": True})
    first = s.recv(4096)
    assert first.startswith(b"HTTP/1.1 200"), first[:200]
    p.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        refused = False
    except OSError:
        refused = True
    events = read_stream(s)
    s.close()
    took = stop(p, 30)
    last = json.loads(events[-2])
    assert refused, "a new connection was accepted after SIGTERM"
    assert events[-1] == "[DONE]" and last["choices"][0]["finish_reason"] == "length", events[-3:]
    print(f"{label}: SIGTERM with a stream in flight: new connections refused, the stream finished "
          f"(finish_reason length, [DONE]), the server exited {took:.2f} s after it")

    # 3. SIGTERM with a stream longer than the drain.
    p, port = start(*flags, "--drain-seconds", "0.5")
    s = send(port, {"prompt": "The", "max_tokens": 200000, "stream": True})
    assert s.recv(4096).startswith(b"HTTP/1.1 200")
    t = time.time()
    p.send_signal(signal.SIGTERM)
    events = read_stream(s)
    ended = time.time() - t
    s.close()
    took = stop(p, 30)
    last = json.loads(events[-2])
    assert events[-1] == "[DONE]" and last["choices"][0]["finish_reason"] == "abort", events[-3:]
    assert ended < 0.5 + 2, f"the stream ended {ended:.1f} s after SIGTERM with --drain-seconds 0.5"
    print(f"{label}: SIGTERM past --drain-seconds 0.5: the stream ended whole after {ended:.2f} s "
          f"(finish_reason abort, [DONE]); the server exited {took:.2f} s later")
    # 5. --request-timeout: a completion past it ends with its text so far.
    p, port = start(*flags, "--request-timeout", "0.5")
    for stream in (False, True):
        t = time.time()
        s = send(port, {"prompt": "The", "max_tokens": 200000, "stream": stream})
        if stream:
            events = read_stream(s, lambda g: b"data: [DONE]" in g)
            reason = json.loads(events[-2])["choices"][0]["finish_reason"]
        else:
            body = read_body(s)
            reason = json.loads(body)["choices"][0]["finish_reason"]
        took = time.time() - t
        s.close()
        assert reason == "abort" and took < 0.5 + 2, (reason, took)
        print(f"{label}: --request-timeout 0.5: a {'streamed' if stream else 'whole'} completion of 200000 tokens "
              f"ended after {took:.2f} s (finish_reason abort)")
    p.send_signal(signal.SIGTERM)
    stop(p, 30)
print("life cycle: every check passed")

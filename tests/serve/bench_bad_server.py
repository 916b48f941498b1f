"""weft serve-bench against servers that answer wrongly: a completion that is not a whole event
stream (a truncated JSON body with status 200, events that are not JSON objects, a stream cut
before "data: [DONE]") counts as an error, never as a completed request, as does a classification
answer without predictions; garbage bytes are an error; a failed warm-up request stops the run
with one line and exit 2.

Usage: bench_bad_server.py WEFT"""
import socket
import subprocess
import sys
import threading

weft = sys.argv[1]


def ok(body, kind=b"text/event-stream"):
    """A 200 answer of `body`."""
    return b"HTTP/1.1 200 OK\r\nContent-Type: " + kind + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body


ANSWERS = {
    "truncated JSON": ok(b'{"a":', b"application/json"),
    "events not JSON": ok(b"data: {oops\n\ndata: [DONE]\n\n"),
    "cut stream": ok(b'data: {"choices": [{"text": "hi", "index": 0}]}\n\n'),
    "garbage": b"\x00\xff" * 500,
}


def serve(answer):
    """A server on loopback that reads a request and sends `answer`, then closes."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)

    def run():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(answer)

    threading.Thread(target=run, daemon=True).start()
    return listener


failures = []
for name, answer in ANSWERS.items():
    listener = serve(answer)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    run = subprocess.run([weft, "serve-bench", "--url", url, "--requests", "2", "--warmup", "0"],
                         capture_output=True, text=True, timeout=120)
    out = run.stdout + run.stderr
    if run.returncode == 0 or "0 requests (2 errors)" not in out or "error: " not in out:
        failures.append(f"{name}: exit {run.returncode}, {out!r}")
    warm = subprocess.run([weft, "serve-bench", "--url", url, "--requests", "2", "--warmup", "1"],
                          capture_output=True, text=True, timeout=120)
    if warm.returncode != 2 or "error: the warm-up request to 127.0.0.1" not in warm.stderr:
        failures.append(f"{name}, warm-up: exit {warm.returncode}, {warm.stderr!r}")
    classify = subprocess.run([weft, "serve-bench", "--url", url, "--endpoint", "classify", "--requests", "2",
                               "--warmup", "0"], capture_output=True, text=True, timeout=120)
    if classify.returncode == 0 or "0 requests (2 errors)" not in classify.stdout + classify.stderr:
        failures.append(f"{name}, classify: exit {classify.returncode}, {classify.stdout + classify.stderr!r}")
    listener.close()

if failures:
    print("FAIL:\n" + "\n".join(failures))
    sys.exit(1)
print(f"serve-bench counts {len(ANSWERS)} kinds of wrong answers as errors, and a failed warm-up stops it")

#!/usr/bin/env python3
"""A client of weft serve, as a user's program talks to it (urllib, http.client, sockets).

usage: client.py PORT TOKEN CHECK [ARGS...]
  complete PROMPT MAX_TOKENS     prints the greedy completion's text (JSON string)
  together N PROMPT MAX_TOKENS   N such requests sent at once (threads past a barrier): a line each
  bad-requests                   every malformed request gets its 4xx and a one-line reason
  auth                           no token and a wrong token get 401; /healthz needs none
  busy                           past --max-concurrency (2), a request gets 429 + Retry-After
  disconnect                     a client gone mid-stream frees its sequence
  classify IDX COUNT             predictions of the first COUNT images (arrays, then base64)
"""
import base64
import gzip
import http.client
import json
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

port, token, check = int(sys.argv[1]), sys.argv[2], sys.argv[3]
args = sys.argv[4:]
base = f"http://127.0.0.1:{port}"


def request(method, path, body=None, headers=None, auth=True):
    h = {"Content-Type": "application/json"}
    if auth and token != "-":
        h["Authorization"] = "Bearer " + token
    h.update(headers or {})
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, headers=h, method=method)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def expect_error(status, want, body, what):
    if status != want:
        sys.exit(f"FAIL: {what}: status {status}, expected {want}: {body[:200]!r}")
    err = json.loads(body)["error"]
    msg = err["message"]
    if not msg or "\n" in msg:
        sys.exit(f"FAIL: {what}: the reason is not one line: {msg!r}")
    print(f"{what}: {status} {msg}")


def metric(name):
    _, _, body = request("GET", "/metrics")
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def stream_events(sock_file):
    """Yields the data of each server-sent event from a chunked HTTP body."""
    for raw in sock_file:
        line = raw.decode().rstrip("\r\n")
        if line.startswith("data: "):
            yield line[6:]


def complete(prompt, max_tokens):
    status, _, body = request("POST", "/v1/completions", {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0})
    assert status == 200, body
    r = json.loads(body)
    assert r["object"] == "text_completion" and r["choices"][0]["index"] == 0, r
    assert r["usage"]["total_tokens"] == r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"], r
    return json.dumps(r["choices"][0]["text"])


if check == "complete":
    print(complete(args[0], int(args[1])))
elif check == "together":
    # One process, every request's connection made at the same moment: requests started by
    # separate programs arrive as far apart as those programs' starts (tens of milliseconds on
    # a busy machine, longer than a short completion takes).
    n = int(args[0])
    texts = [None] * n
    start = threading.Barrier(n)
    def one(k):
        start.wait()
        try:
            texts[k] = complete(args[1], int(args[2]))
        except Exception as e:  # (reported below, with the request's number)
            texts[k] = e
    threads = [threading.Thread(target=one, args=(k,)) for k in range(n)]
    for t in threads: t.start()
    for t in threads: t.join()
    for k, t in enumerate(texts):
        if not isinstance(t, str):
            sys.exit(f"FAIL: request {k + 1} of {n} sent together: {t!r}")
    print("\n".join(texts))

elif check == "bad-requests":
    cases = [
        ("not JSON", "/v1/completions", b"{", 400),
        ("an array body", "/v1/completions", b"[1, 2]", 400),
        ("no prompt", "/v1/completions", {"max_tokens": 3}, 400),
        ("a number prompt", "/v1/completions", {"prompt": 7}, 400),
        ("another model", "/v1/completions", {"prompt": "a", "model": "nope"}, 404),
        ("max_tokens too large", "/v1/completions", {"prompt": "a", "max_tokens": 10**9}, 400),
        ("max_tokens overflowing", "/v1/completions", {"prompt": "a", "max_tokens": 2**64}, 400),
        ("negative temperature", "/v1/completions", {"prompt": "a", "temperature": -1}, 400),
        ("top_p of zero", "/v1/completions", {"prompt": "a", "top_p": 0}, 400),
        ("five stop sequences", "/v1/completions", {"prompt": "a", "stop": list("abcde")}, 400),
        ("n = 17", "/v1/completions", {"prompt": "a", "n": 17}, 400),
        ("an unknown field", "/v1/completions", {"prompt": "a", "temprature": 0}, 400),
        ("a prompt over the limit", "/v1/completions", {"prompt": "a" * 5000}, 400),
        ("a body over the limit", "/v1/completions", b'{"prompt": "' + b"a" * 300000 + b'"}', 413),
        ("classify on a language model", "/v1/classify", {"images": [[0] * 784]}, 400),
        ("an unknown endpoint", "/v2/whatever", {}, 404),
        # Chat completions: the checks of every message, and a model without a chat template.
        ("chat without messages", "/v1/chat/completions", {"max_tokens": 3}, 400),
        ("chat with no message", "/v1/chat/completions", {"messages": []}, 400),
        ("chat with another role", "/v1/chat/completions", {"messages": [{"role": "robot", "content": "a"}]}, 400),
        ("chat with a number content", "/v1/chat/completions", {"messages": [{"role": "user", "content": 7}]}, 400),
        ("chat with an image part", "/v1/chat/completions",
         {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, 400),
        ("chat with tools", "/v1/chat/completions",
         {"messages": [{"role": "user", "content": "a"}], "tools": [{"type": "function"}]}, 400),
    ]
    for what, path, body, want in cases:
        status, _, got = request("POST", path, body)
        expect_error(status, want, got, what)
    # A prompt past the limit is named by the field that made it: a chat's messages.
    for path, body, param in (("/v1/completions", {"prompt": "a" * 5000}, "prompt"),
                              ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a" * 5000}]}, "messages")):
        status, _, got = request("POST", path, body)
        err = json.loads(got)["error"]
        assert status == 400 and err["param"] == param and "tokens; the limit is" in err["message"], (path, status, err)
    # Malformed HTTP: the server answers 400 and stays up.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GARBAGE / NONSENSE\r\n\r\n")
        reply = s.recv(4096).decode(errors="replace")
    assert reply.startswith("HTTP/1.1 400"), reply[:100]
    print("malformed HTTP: " + reply.splitlines()[0])
    # A body that lies about its length: the server waits for it, then gives up; still up.
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\"")
        s.shutdown(socket.SHUT_WR)
        s.recv(4096)
    status, _, _ = request("GET", "/healthz")
    assert status == 200
    print("still serving after the bad requests")

elif check == "auth":
    status, headers, body = request("GET", "/v1/models", auth=False)
    expect_error(status, 401, body, "no token")
    assert headers.get("WWW-Authenticate") == "Bearer", headers
    status, _, body = request("GET", "/v1/models", auth=False, headers={"Authorization": "Bearer " + "x" * len(token)})
    expect_error(status, 401, body, "a wrong token")
    status, _, _ = request("GET", "/healthz", auth=False)
    assert status == 200
    status, _, body = request("GET", "/v1/models")
    assert status == 200 and json.loads(body)["data"][0]["object"] == "model", body
    print("the token is required (401 without it), /healthz is open")

elif check == "busy":
    # Two long streams hold both slots; the third request is refused with 429.
    conns = []
    for _ in range(2):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("POST", "/v1/completions", json.dumps({"prompt": "a", "max_tokens": 1000, "stream": True}),
                  {"Content-Type": "application/json", "Authorization": "Bearer " + token})
        r = c.getresponse()
        assert r.status == 200
        r.readline()  # the first event has arrived: the request is in flight
        conns.append((c, r))
    status, headers, body = request("POST", "/v1/completions", {"prompt": "a", "max_tokens": 1})
    expect_error(status, 429, body, "a third request with 2 in flight")
    assert headers.get("Retry-After") == "1", headers
    for c, _ in conns:
        c.close()

elif check == "disconnect":
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    body = json.dumps({"prompt": "a", "max_tokens": 1000, "stream": True}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Authorization: Bearer " + token.encode() + b"\r\nContent-Length: " + str(len(body)).encode() +
              b"\r\n\r\n" + body)
    got = b""
    while b"data: " not in got:
        got += s.recv(4096)
    s.close()  # gone mid-stream
    deadline = time.time() + 20
    while time.time() < deadline:
        if metric("weft_running_sequences") == 0 and metric("weft_requests_in_flight") == 0:
            break
        time.sleep(0.2)
    else:
        sys.exit("FAIL: the sequence of a client that went away is still decoding")
    generated = metric("weft_generated_tokens_total")
    time.sleep(0.5)
    assert metric("weft_generated_tokens_total") == generated, "tokens are still being generated"
    print(f"a client gone mid-stream: its sequence was freed after {generated:.0f} tokens in all")

elif check == "classify":
    path, count = args[0], int(args[1])
    with gzip.open(path) as f:
        data = f.read()
    n, rows, cols = (int.from_bytes(data[i:i + 4], "big") for i in (4, 8, 12))
    assert rows == cols == 28
    images = [data[16 + i * 784:16 + (i + 1) * 784] for i in range(count)]
    status, _, body = request("POST", "/v1/classify", {"images": [list(im) for im in images]})
    assert status == 200, body
    as_arrays = json.loads(body)["predictions"]
    status, _, body = request("POST", "/v1/classify",
                              {"images_base64": [base64.b64encode(im).decode() for im in images]})
    assert status == 200, body
    as_base64 = json.loads(body)["predictions"]
    assert as_arrays == as_base64
    for i, p in enumerate(as_arrays):
        assert abs(sum(p["probabilities"]) - 1) < 1e-4, p
        print(i, p["label"], p["class"], f"{max(p['probabilities']):.4f}")
    # Concurrent requests are batched together and each answered with its own images.
    results = [None] * 8
    def one(k):
        _, _, b = request("POST", "/v1/classify", {"images": [list(images[k % count])]})
        results[k] = json.loads(b)["predictions"][0]["label"]
    threads = [threading.Thread(target=one, args=(k,)) for k in range(8)]
    for t in threads: t.start()
    for t in threads: t.join()
    assert results == [as_arrays[k % count]["label"] for k in range(8)], results
    print("8 concurrent requests: each got its own image's label")
else:
    sys.exit("unknown check " + check)

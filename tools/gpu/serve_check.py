# Sends six concurrent chat completions (greedy, 40 tokens) and one streamed one to a running
# `weft serve`, and writes the replies and the /metrics text as JSON: `python3 serve_check.py URL OUT.json`.
# tools/gpu/serve-check.sh runs it against `serve --device cpu` and `--device cuda` and compares.
import json, sys, threading, time, urllib.request
base, out = sys.argv[1], sys.argv[2]
prompts = ["Tell me a story about a cat.", "What is the capital of France?", "Once upon a time",
           "Write a poem about the sea.", "Describe a rainy day in London.", "Why is the sky blue?"]
for _ in range(120):
    try:
        urllib.request.urlopen(base + "/health", timeout=2).read(); break
    except Exception:
        time.sleep(0.5)
res = {}
def ask(i, p):
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": p}], "temperature": 0,
                       "max_tokens": 40}).encode()
    t0 = time.time()
    r = urllib.request.urlopen(urllib.request.Request(base + "/v1/chat/completions", body,
                               {"Content-Type": "application/json"}), timeout=120)
    j = json.loads(r.read())
    res[i] = {"prompt": p, "content": j["choices"][0]["message"]["content"], "usage": j.get("usage"),
              "seconds": round(time.time() - t0, 3)}
ts = [threading.Thread(target=ask, args=(i, p)) for i, p in enumerate(prompts)]
for t in ts: t.start()
for t in ts: t.join()
body = json.dumps({"model": "m", "messages": [{"role": "user", "content": prompts[0]}], "temperature": 0,
                   "max_tokens": 40, "stream": True}).encode()
r = urllib.request.urlopen(urllib.request.Request(base + "/v1/chat/completions", body,
                           {"Content-Type": "application/json"}), timeout=120)
text = ""
for line in r.read().decode().splitlines():
    if line.startswith("data: ") and line != "data: [DONE]":
        for c in json.loads(line[6:])["choices"]:
            text += c.get("delta", {}).get("content") or ""
res["stream"] = {"prompt": prompts[0], "content": text}
res["metrics"] = urllib.request.urlopen(base + "/metrics").read().decode()[:2000]
json.dump(res, open(out, "w"), indent=1)
print("replies:", len(res) - 1)

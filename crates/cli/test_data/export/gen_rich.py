#!/usr/bin/env python3
"""Writes rich.jsonl (run from this folder): a session that uses every kind
of content the exports render, for the export tests.

It has reasoning, tool calls with JSON arguments, a failed tool, a steering
message, injected context, an inline PNG image, a prune and a compaction,
an interrupted turn closed by crash repair, and hostile text (markup that
must show as text). No URLs: the HTML test checks that the export names
none. The committed .jsonl is the test input; this script shows how it was
made."""
import base64
import json
import struct
import zlib

T0 = 1767225600000


def png(width, height):
    """A small RGB PNG: four coloured quadrants with a diagonal stripe."""
    rows = b""
    for y in range(height):
        row = b"\x00"
        for x in range(width):
            if abs(x - y) < 3:
                px = (255, 255, 255)
            elif x < width // 2 and y < height // 2:
                px = (40, 100, 200)
            elif x >= width // 2 and y < height // 2:
                px = (30, 140, 80)
            elif x < width // 2:
                px = (200, 110, 10)
            else:
                px = (120, 80, 220)
            row += bytes(px)
        rows += row

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")


class Log:
    def __init__(self, sid):
        self.header = {"type": "session", "version": 0, "id": sid, "createdAt": T0, "cwd": "/home/dev/shop"}
        self.events = []

    def add(self, typ, data, sources=None, op=None):
        e = {"seq": len(self.events), "time": T0 + 1500 * len(self.events), "type": typ, "data": data}
        if sources is not None:
            e["sourceEventSeqs"] = sources
        if op is not None:
            e["surfaceOp"] = op
        self.events.append(e)
        return e["seq"]


MODEL = {"kind": "model", "provider": "example", "model": "example-large"}
log = Log("rich-1")

def text(t):
    return {"type": "text", "text": t}

def chunks_for(turn, step, blocks, usage):
    seqs = []
    for i, b in enumerate(blocks):
        if b["type"] == "text":
            seqs.append(log.add("assistant/chunk", {"turn": turn, "step": step, "chunk": {"type": "text-delta", "index": i, "text": b["text"]}}))
        elif b["type"] == "reasoning":
            seqs.append(log.add("assistant/chunk", {"turn": turn, "step": step, "chunk": {"type": "reasoning-delta", "index": i, "text": b["text"]}}))
        elif b["type"] == "tool-call":
            seqs.append(log.add("assistant/chunk", {"turn": turn, "step": step, "chunk": {"type": "tool-call-delta", "index": i, "id": b["id"], "name": b["name"], "argumentsDelta": b["arguments"]}}))
    seqs.append(log.add("assistant/chunk", {"turn": turn, "step": step, "chunk": dict(type="usage", **usage)}))
    return seqs

def assistant(turn, step, mid, blocks, usage):
    seqs = chunks_for(turn, step, blocks, usage)
    return log.add("assistant/message", {"turn": turn, "step": step, "message": {"id": mid, "role": "assistant", "content": blocks, "source": MODEL}, "usage": usage}, sources=seqs, op="append")

def result(turn, step, mid, cid, content, call_seq, is_error=False, error=None, op="append", sources=None):
    data = {"turn": turn, "step": step, "message": {"id": mid, "role": "user", "content": [{"type": "tool-result", "toolCallId": cid, "isError": is_error, "content": content}], "source": {"kind": "tool", "callId": cid}}}
    if error:
        data["error"] = error
    return log.add("tool/result", data, sources=sources if sources is not None else [call_seq], op=op)

# Turn 1: hostile text, reasoning, a tool that works and one that fails.
log.add("turn/start", {"turn": 1})
u1 = log.add("user/message", {"turn": 1, "message": {"id": "u1", "role": "user", "content": [text(
    "My product page shows <script>alert(\"pwned\")</script> literally, and an <img src=x onerror=alert(1)> tag. "
    "Can you fix the template? Keep the & and the \"quotes\" as they are.")], "source": {"kind": "user"}}}, op="append")
log.add("step/start", {"turn": 1, "step": 1})
args1 = json.dumps({"path": "templates/product.html"})
a1 = assistant(1, 1, "a1", [
    {"type": "reasoning", "text": "The template probably escapes the description twice. Read it first."},
    text("Let me look at the template."),
    {"type": "tool-call", "id": "call_read", "name": "read_file", "arguments": args1},
], {"inputTokens": 812, "outputTokens": 64})
c1 = log.add("tool/call", {"turn": 1, "step": 1, "callId": "call_read", "name": "read_file", "arguments": args1})
template = "\n".join([
    "<article class=\"product\">",
    "  <h1>{{ product.name }}</h1>",
    "  <div class=\"description\">{{ product.description | safe }}</div>",
    "  <p class=\"price\">{{ product.price }} €</p>",
    "</article>",
]) + "\n"
r1 = result(1, 1, "r1", "call_read", [text(template * 6)], c1)
log.add("step/end", {"turn": 1, "step": 1})
log.add("step/start", {"turn": 1, "step": 2})
args2 = json.dumps({"path": "templates/product.html", "find": "| safe", "replace": ""})
a2 = assistant(1, 2, "a2", [
    text("The description is marked `safe`, so its markup runs. I'll remove the filter."),
    {"type": "tool-call", "id": "call_edit", "name": "edit_file", "arguments": args2},
], {"inputTokens": 1460, "outputTokens": 58})
c2 = log.add("tool/call", {"turn": 1, "step": 2, "callId": "call_edit", "name": "edit_file", "arguments": args2})
result(1, 2, "r2", "call_edit", [text("error: templates/product.html is read-only (permission denied)")], c2,
       is_error=True, error={"name": "PermissionDenied", "code": "EACCES"})
log.add("step/end", {"turn": 1, "step": 2})
log.add("step/start", {"turn": 1, "step": 3})
a3 = assistant(1, 3, "a3", [text(
    "I can't write to the file, so here is the change to make by hand:\n\n"
    "```diff\n-  <div class=\"description\">{{ product.description | safe }}</div>\n"
    "+  <div class=\"description\">{{ product.description }}</div>\n```\n\n"
    "Without `| safe` the template engine escapes `<` and `&`, so the text shows as written.")],
    {"inputTokens": 1530, "outputTokens": 91})
log.add("step/end", {"turn": 1, "step": 3})
log.add("turn/end", {"turn": 1, "reason": {"kind": "completed"}})

# Between turns: injected context.
ctx = log.add("context/message", {"message": {"id": "ctx1", "role": "user", "content": [text(
    "<system-reminder>templates/product.html is now writable</system-reminder>")], "source": {"kind": "plugin", "plugin": "watcher"}}}, op="append")

# Turn 2: an image, steering, then a prune and a compaction.
log.add("turn/start", {"turn": 2})
image = base64.b64encode(png(160, 96)).decode()
u2 = log.add("user/message", {"turn": 2, "message": {"id": "u2", "role": "user", "content": [
    text("Here is how the page looks now. Please apply the fix yourself."),
    {"type": "image", "mediaType": "image/png", "data": image},
], "source": {"kind": "user"}}}, op="append")
log.add("step/start", {"turn": 2, "step": 1})
st = log.add("steering/message", {"message": {"id": "s1", "role": "user", "content": [text("Also keep a backup of the old template.")], "source": {"kind": "user"}}}, op="append")
args3 = json.dumps({"path": "templates/product.html", "find": "| safe", "replace": "", "backup": True})
a4 = assistant(2, 1, "a4", [
    text("Applying the edit, with a backup."),
    {"type": "tool-call", "id": "call_edit2", "name": "edit_file", "arguments": args3},
], {"inputTokens": 2210, "outputTokens": 40})
c3 = log.add("tool/call", {"turn": 2, "step": 1, "callId": "call_edit2", "name": "edit_file", "arguments": args3})
result(2, 1, "r3", "call_edit2", [text("edited templates/product.html (1 change); backup at templates/product.html.bak")], c3)
log.add("step/end", {"turn": 2, "step": 1})
log.add("step/start", {"turn": 2, "step": 2})
a5 = assistant(2, 2, "a5", [text("Done: descriptions are escaped now, and the old template is in `product.html.bak`.")], {"inputTokens": 2302, "outputTokens": 22})
log.add("step/end", {"turn": 2, "step": 2})
log.add("turn/end", {"turn": 2, "reason": {"kind": "completed"}})

# Prune the long template read (a single-node tool/result replace).
pr = result(1, 1, "r1-pruned", "call_read", [text("[pruned: the template, 6 copies; the original is event %d]" % r1)], c1,
            op={"op": "replace", "start": r1, "end": r1}, sources=[r1])
# Compact turn 1 (from u1 through a3) into a summary.
cs = log.add("compaction/start", {"reason": "budget", "estimatedTokens": 12000})
# The surface from u1 to a3: u1, a1, pr (in r1's place), a2, r2, a3.
r2_seq = next(e["seq"] for e in log.events if e["type"] == "tool/result" and e["data"]["message"]["id"] == "r2")
surface_part = [u1, a1, pr, a2, r2_seq, a3]
summary = log.add("user/message", {"message": {"id": "sum1", "role": "user", "content": [text(
    "Summary of turn 1: the product template marked descriptions `| safe`, so markup such as <script> ran. "
    "The edit failed (read-only file); the fix was explained.")], "source": {"kind": "plugin", "plugin": "compaction"}}},
    sources=[cs] + surface_part, op={"op": "replace", "start": u1, "end": a3})
log.add("compaction/end", {"summarySeq": summary})

# Turn 3: interrupted mid-stream, closed by crash repair.
log.add("turn/start", {"turn": 3})
log.add("user/message", {"turn": 3, "message": {"id": "u3", "role": "user", "content": [text("Now run the test suite.")], "source": {"kind": "user"}}}, op="append")
log.add("step/start", {"turn": 3, "step": 1})
args4 = json.dumps({"command": "make test"})
a6 = assistant(3, 1, "a6", [text("Running the tests."), {"type": "tool-call", "id": "call_test", "name": "run", "arguments": args4}], {"inputTokens": 900, "outputTokens": 18})
c4 = log.add("tool/call", {"turn": 3, "step": 1, "callId": "call_test", "name": "run", "arguments": args4})
# The process died here; these are the closers crash repair appends.
last_time = log.events[-1]["time"]
def closer(typ, data, sources=None, op=None):
    seq = log.add(typ, data, sources, op)
    log.events[-1]["time"] = last_time
    return seq
closer("tool/result", {"turn": 3, "step": 1, "message": {"id": "repair-call_test", "role": "user", "content": [{"type": "tool-result", "toolCallId": "call_test", "isError": True, "content": [text("The tool call's outcome is unknown: the session was interrupted while it ran.")]}], "source": {"kind": "tool", "callId": "call_test"}}, "error": {"name": "Interrupted", "code": "TOOL_OUTCOME_UNKNOWN"}}, sources=[c4], op="append")
closer("step/end", {"turn": 3, "step": 1})
closer("turn/end", {"turn": 3, "reason": {"kind": "interrupted"}})

with open("rich.jsonl", "w") as f:
    f.write(json.dumps(log.header, separators=(",", ":"), ensure_ascii=False) + "\n")
    for e in log.events:
        f.write(json.dumps(e, separators=(",", ":"), ensure_ascii=False) + "\n")

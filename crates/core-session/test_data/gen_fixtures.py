#!/usr/bin/env python3
"""Writes the realistic fixture sessions in ok/ (run from this folder).

Kept beside the fixtures so a reviewer can see how they were made; the
committed .jsonl files are the test inputs."""
import json

T0 = 1767225600000

class Log:
    def __init__(self, sid):
        self.header = {"type": "session", "version": 0, "id": sid, "createdAt": T0}
        self.events = []
        self.turn = 0
        self.step = 0
        self.n = 0

    def add(self, typ, data, sources=None, op=None):
        e = {"seq": len(self.events), "time": T0 + 10 * len(self.events), "type": typ, "data": data}
        if sources is not None:
            e["sourceEventSeqs"] = sources
        if op is not None:
            e["surfaceOp"] = op
        self.events.append(e)
        return e["seq"]

    def mid(self, p):
        self.n += 1
        return f"{p}{self.n}"

    def msg(self, role, blocks, source, p):
        return {"id": self.mid(p), "role": role, "content": blocks, "source": source}

    def turn_start(self, text):
        self.turn += 1
        self.step = 0
        self.add("turn/start", {"turn": self.turn})
        return self.add("user/message", {"turn": self.turn, "message": self.msg("user", [{"type": "text", "text": text}], {"kind": "user"}, "u")}, op="append")

    def assistant(self, text=None, calls=(), usage=(100, 20)):
        self.step += 1
        t, s = self.turn, self.step
        self.add("step/start", {"turn": t, "step": s})
        chunks, blocks, idx = [], [], 0
        if text:
            half = len(text) // 2
            for piece in (text[:half], text[half:]):
                chunks.append(self.add("assistant/chunk", {"turn": t, "step": s, "chunk": {"type": "text-delta", "index": idx, "text": piece}}))
            blocks.append({"type": "text", "text": text})
            idx += 1
        for cid, name, args in calls:
            cut = len(args) // 2
            chunks.append(self.add("assistant/chunk", {"turn": t, "step": s, "chunk": {"type": "tool-call-delta", "index": idx, "id": cid, "name": name, "argumentsDelta": args[:cut]}}))
            chunks.append(self.add("assistant/chunk", {"turn": t, "step": s, "chunk": {"type": "tool-call-delta", "index": idx, "id": cid, "argumentsDelta": args[cut:]}}))
            blocks.append({"type": "tool-call", "id": cid, "name": name, "arguments": args})
            idx += 1
        u = {"inputTokens": usage[0], "outputTokens": usage[1]}
        chunks.append(self.add("assistant/chunk", {"turn": t, "step": s, "chunk": dict(type="usage", **u)}))
        a = self.add("assistant/message", {"turn": t, "step": s, "message": self.msg("assistant", blocks, {"kind": "model", "provider": "scripted", "model": "fixture-1"}, "a"), "usage": u}, sources=chunks, op="append")
        return a

    def tool_calls(self, calls, outputs):
        t, s = self.turn, self.step
        seqs = [self.add("tool/call", {"turn": t, "step": s, "callId": cid, "name": name, "arguments": args}) for cid, name, args in calls]
        results = []
        for (cid, _, _), call_seq, out in zip(calls, seqs, outputs):
            results.append(self.add("tool/result", {"turn": t, "step": s, "message": self.msg("user", [{"type": "tool-result", "toolCallId": cid, "isError": False, "content": [{"type": "text", "text": out}]}], {"kind": "tool", "callId": cid}, "r")}, sources=[call_seq], op="append"))
        return results

    def step_end(self):
        self.add("step/end", {"turn": self.turn, "step": self.step})

    def turn_end(self):
        self.add("turn/end", {"turn": self.turn, "reason": {"kind": "completed"}})

    def simple_turn(self, q, a):
        self.turn_start(q)
        self.assistant(a)
        self.step_end()
        self.turn_end()

    def compaction(self, start, end, shadowed, summary):
        cs = self.add("compaction/start", {"reason": "budget", "estimatedTokens": 9000})
        s = self.add("user/message", {"message": self.msg("user", [{"type": "text", "text": summary}], {"kind": "plugin", "plugin": "compaction"}, "sum")}, sources=[cs] + shadowed, op={"op": "replace", "start": start, "end": end})
        self.add("compaction/end", {"summarySeq": s})
        return s

    def write(self, path):
        with open(path, "w") as f:
            f.write(json.dumps(self.header, separators=(",", ":"), ensure_ascii=False) + "\n")
            for e in self.events:
                f.write(json.dumps(e, separators=(",", ":"), ensure_ascii=False) + "\n")


def surface_of(log):
    surface = []
    for e in log.events:
        op = e.get("surfaceOp")
        if op == "append":
            surface.append(e["seq"])
        elif isinstance(op, dict):
            a, b = surface.index(op["start"]), surface.index(op["end"])
            surface[a:b + 1] = [e["seq"]]
    return surface


# 1. Plain chat: three turns, no tools.
log = Log("plain-chat")
log.simple_turn("Hello! Who are you?", "I am a scripted assistant.")
log.simple_turn("What is 2 + 2?", "2 + 2 = 4.")
log.simple_turn("Thanks — and in Ελληνικά?", "Τέσσερα. 🙂")
log.write("ok/plain-chat.jsonl")

# 2. Multi-step tool use: two calls in one step, then a third step.
log = Log("multi-step-tools")
log.turn_start("Compare a.txt and b.txt, then count the lines of the longer one.")
calls = [("call_a", "read_file", '{"path":"a.txt"}'), ("call_b", "read_file", '{"path":"b.txt"}')]
log.assistant("Reading both files.", calls)
log.tool_calls(calls, ["alpha\nbeta\n", "gamma\ndelta\nepsilon\n"])
log.step_end()
calls = [("call_c", "count_lines", '{"path":"b.txt"}')]
log.assistant(None, calls)
log.tool_calls(calls, ["3"])
log.step_end()
log.assistant("b.txt is longer; it has 3 lines.")
log.step_end()
log.turn_end()
log.write("ok/multi-step-tools.jsonl")

# 3. Two successive compactions; the second starts at the first summary.
log = Log("two-compactions")
for i in range(3):
    log.simple_turn(f"Question {i + 1}?", f"Answer {i + 1}.")
surf = surface_of(log)
keep = 2
first = log.compaction(surf[0], surf[-keep - 1], surf[:-keep], "Summary 1: three questions were answered.")
for i in range(3, 5):
    log.simple_turn(f"Question {i + 1}?", f"Answer {i + 1}.")
surf = surface_of(log)
assert surf[0] == first
second = log.compaction(surf[0], surf[-keep - 1], surf[:-keep], "Summary 2: five questions were answered.")
log.simple_turn("Question 6?", "Answer 6.")
log.write("ok/two-compactions.jsonl")

# 4. Tool-result pruning by a single-node replace.
log = Log("tool-result-pruning")
log.turn_start("Show me big.log.")
calls = [("call_1", "read_file", '{"path":"big.log"}')]
log.assistant("Reading it.", calls)
[res] = log.tool_calls(calls, ["line of log output\n" * 60])
log.step_end()
log.assistant("It is 60 identical lines.")
log.step_end()
log.turn_end()
log.turn_start("OK, anything else?")
log.add("tool/result", {"turn": 1, "step": 1, "message": log.msg("user", [{"type": "tool-result", "toolCallId": "call_1", "isError": False, "content": [{"type": "text", "text": "[pruned: 1140 characters; the original is event %d]" % res}]}], {"kind": "tool", "callId": "call_1"}, "r")}, sources=[res], op={"op": "replace", "start": res, "end": res})
log.assistant("No, that is all.")
log.step_end()
log.turn_end()
log.write("ok/tool-result-pruning.jsonl")

# 5. A crash mid-turn: a tool call was recorded, a second was requested but
# never started. crash-open.jsonl is the log as the crash left it.
log = Log("crash")
log.simple_turn("Warm-up question?", "Warm-up answer.")
log.turn_start("Run both scripts.")
calls = [("call_x", "run", '{"script":"x.sh"}'), ("call_y", "run", '{"script":"y.sh"}')]
log.assistant("Running them.", calls)
log.add("tool/call", {"turn": log.turn, "step": log.step, "callId": "call_x", "name": "run", "arguments": '{"script":"x.sh"}'})
log.write("ok/crash-open.jsonl")

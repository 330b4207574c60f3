// turnback: undo for this project's opencode sessions.
// Written by `turnback install opencode`; `turnback install opencode --uninstall` removes it.
// It forwards opencode's events, one JSON object each, to `turnback hook opencode`, which
// records turns, checkpoints and shell commands. It never blocks opencode on turnback's
// account: a failure is turnback's to log, and every call here resolves.
import { spawn } from "node:child_process";

const TURNBACK = __TURNBACK__;
// Tools whose files turnback stages before they run.
const WRITES = new Set(["write", "edit", "multiedit", "apply_patch", "patch", "bash"]);

export const TurnbackPlugin = async ({ directory, worktree }) => {
  const root = worktree && worktree !== "/" ? worktree : directory;
  const parents = new Map(); // sub-agent session -> its root session
  const args = new Map(); // callID -> args, for opencode versions whose "after" lacks them
  const replies = new Map(); // session -> (text part id -> its final text), sent at idle
  let queue = Promise.resolve();

  const run = (body) =>
    new Promise((resolve) => {
      let child;
      try {
        child = spawn(TURNBACK, ["hook", "opencode"], { cwd: root, stdio: ["pipe", "ignore", "ignore"] });
      } catch {
        return resolve();
      }
      const timer = setTimeout(() => child.kill("SIGTERM"), 30000);
      child.on("error", () => { clearTimeout(timer); resolve(); });
      child.on("close", () => { clearTimeout(timer); resolve(); });
      child.stdin.on("error", () => {});
      child.stdin.end(JSON.stringify(body));
    });

  // In order, one at a time: opencode does not await its event stream.
  const send = (fields) => {
    const root_session = parents.get(fields.sessionID) ?? fields.sessionID;
    const subagent = parents.has(fields.sessionID) ? fields.sessionID : undefined;
    // The project (the workspace), and the directory opencode runs in, which its relative
    // paths are relative to.
    const body = { ...fields, sessionID: root_session, subagent, directory: root, cwd: directory };
    queue = queue.then(() => run(body));
    return queue;
  };

  return {
    "chat.message": async (input, output) => {
      if (parents.has(input.sessionID)) return; // a sub-agent's task, not a person's prompt
      const prompt = (output?.parts ?? [])
        .filter((p) => p.type === "text" && !p.synthetic && !p.ignored)
        .map((p) => p.text)
        .join("\n");
      await send({ event: "prompt", sessionID: input.sessionID, prompt });
    },
    "tool.execute.before": async (input, output) => {
      args.set(input.callID, output?.args);
      if (!WRITES.has(input.tool)) return;
      await send({ event: "tool-before", sessionID: input.sessionID, tool: input.tool, callID: input.callID, args: output?.args });
    },
    "tool.execute.after": async (input, output) => {
      const called = input.args ?? args.get(input.callID);
      args.delete(input.callID);
      if (!WRITES.has(input.tool)) return;
      await send({ event: "tool-after", sessionID: input.sessionID, tool: input.tool, callID: input.callID, args: called, metadata: output?.metadata });
    },
    event: async ({ event }) => {
      const p = event?.properties ?? {};
      switch (event?.type) {
        case "session.created":
          if (p.info?.parentID) {
            parents.set(p.info.id, parents.get(p.info.parentID) ?? p.info.parentID);
            await send({ event: "subagent-start", sessionID: p.info.id, id: p.info.id, kind: p.info.title });
          }
          return;
        case "session.idle":
          if (parents.has(p.sessionID)) {
            await send({ event: "subagent-stop", sessionID: p.sessionID, id: p.sessionID });
          } else {
            const reply = [...(replies.get(p.sessionID)?.values() ?? [])].join("\n\n");
            replies.delete(p.sessionID);
            await send({ event: "idle", sessionID: p.sessionID, reply: reply || undefined });
          }
          return;
        case "session.compacted":
          await send({ event: "compacted", sessionID: p.sessionID });
          return;
        case "message.part.updated": {
          const part = p.part;
          // The model's own text, once finished (parts are re-sent while they stream).
          if (part?.type === "text" && !part.synthetic && !part.ignored && part.time?.end && !parents.has(part.sessionID)) {
            if (!replies.has(part.sessionID)) replies.set(part.sessionID, new Map());
            replies.get(part.sessionID).set(part.id, part.text);
            return;
          }
          if (part?.type === "tool" && part.state?.status === "error" && WRITES.has(part.tool)) {
            args.delete(part.callID);
            await send({ event: "tool-failed", sessionID: part.sessionID, tool: part.tool, callID: part.callID, args: part.state.input });
          }
          return;
        }
        default:
          return;
      }
    },
  };
};

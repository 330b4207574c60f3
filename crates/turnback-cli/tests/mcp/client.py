"""An MCP client this project did not write (the official Python SDK, `pip install mcp`)
driving `turnback mcp` end to end. Usage: client.py TURNBACK_EXE WORKSPACE
The environment (TURNBACK_HOME, TURNBACK_KEY, ...) is passed through to the server.
Prints one JSON line per step; exits non-zero on any failed expectation."""

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def attr(obj, snake, camel):
    """Field access across SDK generations (2.x snake_case, 1.x camelCase)."""
    return getattr(obj, snake) if hasattr(obj, snake) else getattr(obj, camel)


def is_error(result):
    return bool(attr(result, "is_error", "isError"))


def data(result):
    assert not is_error(result), result.content
    structured = attr(result, "structured_content", "structuredContent")
    if structured is not None:
        return structured
    return json.loads(result.content[0].text)


async def main(exe, ws):
    params = StdioServerParameters(command=exe, args=["mcp"], env=dict(os.environ), cwd=ws)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = {t.name: t for t in (await session.list_tools()).tools}
            expected = {"read_file", "create_file", "write_file", "edit_file", "delete_file", "list_turns",
                        "list_checkpoints", "rollback_preview", "rollback_apply", "rewind_preview",
                        "rewind_apply", "diff_turn", "begin_turn", "end_turn", "shell_ran"}
            assert expected <= set(tools), sorted(tools)
            for name in expected:
                schema = attr(tools[name], "input_schema", "inputSchema")
                assert schema.get("type") == "object", (name, schema)
                # Every tool says what it returns (the SDK checks each result against it)
                # and what it does to the world.
                output = attr(tools[name], "output_schema", "outputSchema")
                assert output and output.get("type") == "object", (name, output)
                notes = tools[name].annotations
                assert notes is not None, name
                read_only = attr(notes, "read_only_hint", "readOnlyHint")
                assert read_only is (name in {"read_file", "list_turns", "list_checkpoints", "rollback_preview",
                                              "rewind_preview", "diff_turn"}), (name, notes)
                if name in {"rollback_apply", "rewind_apply"}:
                    assert attr(notes, "destructive_hint", "destructiveHint") is True, (name, notes)
            assert "old_string" in attr(tools["edit_file"], "input_schema", "inputSchema")["properties"]
            print(json.dumps({"tools": sorted(tools)}))

            begun = data(await session.call_tool("begin_turn", {"prompt": "take notes"}))
            assert begun["turn"]["index"] == 1 and begun["turn"]["preview"] == "take notes", begun
            made = data(await session.call_tool("create_file", {"path": "notes.md", "content": "one\n"}))
            print(json.dumps({"created": made["checkpointId"]}))
            data(await session.call_tool("edit_file", {"path": "notes.md", "old_string": "one", "new_string": "two"}))
            data(await session.call_tool("write_file", {"path": "src/app.py", "content": "print('hi')\n"}))
            read = data(await session.call_tool("read_file", {"path": "notes.md"}))
            assert read["content"] == "two\n", read

            # A clear tool error, not a crash: editing text that is not there.
            bad = await session.call_tool("edit_file", {"path": "notes.md", "old_string": "zzz", "new_string": "x"})
            assert is_error(bad) and "edit-no-match" in bad.content[0].text, bad
            escape = await session.call_tool("read_file", {"path": "../outside.txt"})
            assert is_error(escape), escape
            # The error's hint names this server's tool, not a command.
            exists = await session.call_tool("create_file", {"path": "notes.md", "content": "x"})
            error = json.loads(exists.content[0].text)["error"]
            assert error["code"] == "already-exists" and "write_file" in error["message"], error
            assert "fs write" not in error["message"], error

            checkpoints = data(await session.call_tool("list_checkpoints", {}))
            assert len(checkpoints["checkpoints"]) == 3, checkpoints
            preview = data(await session.call_tool("rollback_preview", {"turn": 1}))
            assert preview["resultType"] == "full", preview
            applied = data(await session.call_tool("rollback_apply", {"turn": 1, "plan_id": preview["planId"]}))
            assert applied["resultType"] == "full", applied
            print(json.dumps({"rolledBack": applied["appliedPaths"]}))
            ended = data(await session.call_tool("end_turn", {}))
            assert ended["endSnapshot"]["id"], ended
            turns = data(await session.call_tool("list_turns", {}))
            print(json.dumps({"turns": len(turns["turns"])}))
            diff = data(await session.call_tool("diff_turn", {"turn": 1, "patch": True}))
            assert diff["changes"] == [], diff  # everything the turn did was rolled back
            rewind = data(await session.call_tool("rewind_preview", {"to": 1}))
            assert rewind["resultType"] == "full", rewind

            # A second turn, with a shell command the client reports; then rewound.
            data(await session.call_tool("begin_turn", {"prompt": "configure", "new": True}))
            data(await session.call_tool("write_file", {"path": "notes.md", "content": "configured\n"}))
            ran = data(await session.call_tool("shell_ran", {"command": "make config", "exit_status": 0, "id": "sh-1"}))
            again = data(await session.call_tool("shell_ran", {"command": "make config", "exit_status": 0, "id": "sh-1"}))
            assert len(again["turn"]["shellEffects"]) == 1, (ran, again)
            data(await session.call_tool("end_turn", {}))
            plan = data(await session.call_tool("rewind_preview", {"to": 2}))
            assert plan["resultType"] == "full", plan
            rewound = data(await session.call_tool("rewind_apply", {"to": 2, "plan_id": plan["planId"]}))
            assert rewound["plan"]["resultType"] == "full" and rewound["restoredPrompt"] == "configure", rewound
            print(json.dumps({"rewound": [p["path"] for p in rewound["plan"]["paths"]]}))


asyncio.run(main(sys.argv[1], sys.argv[2]))

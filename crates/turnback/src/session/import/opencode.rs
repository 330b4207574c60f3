//! opencode's record of a session, read into the turns the person kept. The record is the
//! shape `opencode export` prints — `{"info": session, "messages": [{"info": message,
//! "parts": [part, …]}, …]}` (types in opencode's `session/message-v2.ts`) — and
//! [`read_storage`] builds the same from opencode's storage: the SQLite database of v1.2
//! and later (`opencode.db`: `session`, `message` and `part` tables, each record's JSON in
//! `data`), or the JSON files before it (`storage/session/<project>/<id>.json`,
//! `storage/message/<session>/<id>.json`, `storage/part/<message>/<id>.json`).
//!
//! Invariants:
//! - A user message with text of its own (parts that are not `synthetic` or `ignored`)
//!   begins a turn, keyed by its id; the assistant messages after it make the reply: text,
//!   reasoning (thinking), tool parts with their input, output or error.
//! - Messages at or after the session's `revert.messageID` were undone by opencode's own
//!   `/undo`: they are not read.
//! - Reading the storage never writes to it (the database is opened read-only).

use std::path::Path;

use serde_json::{Value, json};

use super::{Parsed, SourceTurn, join_text, reply_entry};
use crate::base::time::format_ms;
use crate::error::{Error, IoResultExt, Result};
use crate::session::history::ToolCall;

/// Reads an export.
///
/// # Errors
/// `invalid-argument` if it is not an opencode session export.
pub(crate) fn parse(text: &str) -> Result<Parsed> {
    let export: Value =
        serde_json::from_str(text).map_err(|e| Error::invalid(format!("not an opencode session export: {e}")))?;
    let messages = export
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| Error::invalid("no messages: not an opencode session export"))?;
    let reverted = export.pointer("/info/revert/messageID").and_then(Value::as_str);
    let mut ordered: Vec<&Value> = messages.iter().collect();
    // Message ids sort in time order.
    ordered.sort_by(|a, b| id(a).cmp(id(b)));
    let mut turns: Vec<SourceTurn> = Vec::new();
    let mut skipped = 0;
    for m in ordered {
        if reverted.is_some_and(|r| id(m) >= r) {
            skipped += 1;
            continue;
        }
        let info = m.get("info").unwrap_or(&Value::Null);
        let at = time(info);
        let parts = m.get("parts").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        match info.get("role").and_then(Value::as_str) {
            Some("user") => {
                let mut prompt = String::new();
                for p in parts.iter().filter(|p| own_text(p)) {
                    join_text(&mut prompt, p.get("text").and_then(Value::as_str));
                }
                if prompt.is_empty() {
                    skipped += 1;
                    continue;
                }
                let key = id(m).to_string();
                turns.push(SourceTurn { key, prompt, sent: None, started_at: at.clone(), ended_at: at, reply: None });
            }
            Some("assistant") => {
                let Some(turn) = turns.last_mut() else {
                    skipped += 1;
                    continue;
                };
                turn.ended_at = at.clone();
                let reply = turn.reply.get_or_insert_with(|| reply_entry(&at));
                for p in parts {
                    match p.get("type").and_then(Value::as_str) {
                        Some("text") if own_text(p) => {
                            join_text(&mut reply.content, p.get("text").and_then(Value::as_str))
                        }
                        Some("reasoning") => {
                            let mut thinking = reply.thinking.take().unwrap_or_default();
                            join_text(&mut thinking, p.get("text").and_then(Value::as_str));
                            reply.thinking = Some(thinking).filter(|t| !t.is_empty());
                        }
                        Some("tool") => {
                            let state = p.get("state").unwrap_or(&Value::Null);
                            let status = state.get("status").and_then(Value::as_str).unwrap_or("");
                            reply.tool_calls.get_or_insert_with(Vec::new).push(ToolCall {
                                name: p.get("tool").and_then(Value::as_str).unwrap_or("").to_string(),
                                input: state.get("input").cloned().unwrap_or(Value::Null),
                                output: state.get("output").or_else(|| state.get("error")).cloned(),
                                error: (status == "error").then_some(true),
                            });
                        }
                        _ => {}
                    }
                }
            }
            _ => skipped += 1,
        }
    }
    let session = export.pointer("/info/id").and_then(Value::as_str).map(str::to_string);
    Ok(Parsed { turns, skipped_rows: skipped, session })
}

fn id(m: &Value) -> &str {
    m.pointer("/info/id").and_then(Value::as_str).unwrap_or("")
}

/// A part's text is the person's or the model's own (opencode adds `synthetic` text, and
/// marks text to leave out as `ignored`).
fn own_text(p: &Value) -> bool {
    let flag = |k: &str| p.get(k).and_then(Value::as_bool).unwrap_or(false);
    p.get("type").and_then(Value::as_str) == Some("text") && !flag("synthetic") && !flag("ignored")
}

/// A message's creation time (epoch milliseconds in opencode) as RFC 3339.
fn time(info: &Value) -> String {
    info.pointer("/time/created").and_then(Value::as_i64).map(format_ms).unwrap_or_default()
}

/// The export of session `session` from opencode's data directory `data` (its database,
/// else its JSON files).
///
/// # Errors
/// `not-found` if neither holds the session; `io` or `corrupt` when they cannot be read.
pub(crate) fn read_storage(data: &Path, session: &str) -> Result<String> {
    let db = std::env::var_os("OPENCODE_DB").map(|p| data.join(p)).unwrap_or_else(|| data.join("opencode.db"));
    if db.exists()
        && let Some(export) = from_database(&db, session)?
    {
        return Ok(export.to_string());
    }
    from_files(&data.join("storage"), session)
        .map(|e| e.to_string())
        .map_err(|e| Error::not_found(format!("opencode session {session} in {} ({})", data.display(), e.message)))
}

fn from_database(db: &Path, session: &str) -> Result<Option<Value>> {
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = rusqlite::Connection::open_with_flags(db, flags)?;
    conn.busy_timeout(std::time::Duration::from_secs(2))?;
    let revert: Option<Option<String>> = conn
        .query_row("SELECT revert FROM session WHERE id = ?1", [session], |r| r.get(0))
        .map(Some)
        .or_else(|e| if e == rusqlite::Error::QueryReturnedNoRows { Ok(None) } else { Err(e) })?;
    let Some(revert) = revert else { return Ok(None) };
    let parse = |text: String| serde_json::from_str::<Value>(&text).unwrap_or(Value::Null);
    let mut messages = Vec::new();
    let mut stmt = conn.prepare("SELECT id, data FROM message WHERE session_id = ?1 ORDER BY id")?;
    let rows = stmt.query_map([session], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
    let mut parts_of = conn.prepare("SELECT id, data FROM part WHERE message_id = ?1 ORDER BY id")?;
    for row in rows {
        let (id, data) = row?;
        let mut info = parse(data);
        info["id"] = json!(id);
        let parts = parts_of
            .query_map([&id], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?
            .map(|p| p.map(|(pid, data)| with_id(parse(data), &pid)))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        messages.push(json!({ "info": info, "parts": parts }));
    }
    let revert = revert.map(parse).unwrap_or(Value::Null);
    Ok(Some(json!({ "info": { "id": session, "revert": revert }, "messages": messages })))
}

fn with_id(mut v: Value, id: &str) -> Value {
    v["id"] = json!(id);
    v
}

fn from_files(storage: &Path, session: &str) -> Result<Value> {
    // Each file as a regular file only (never a FIFO or a device), read within the caps
    // of any JSON turnback takes from outside.
    let read = |p: &Path| -> Result<Value> {
        let file = crate::fs::files::open_regular(p)?;
        let text = crate::base::bounded::read_json(std::io::BufReader::new(file))
            .map_err(|e| Error::invalid(format!("{}: {e}", p.display())))?
            .text;
        serde_json::from_str(&text).map_err(|e| Error::corrupt(p.display(), e))
    };
    let sorted = |dir: &Path| -> Result<Vec<std::path::PathBuf>> {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .context(dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        Ok(files)
    };
    // storage/session/<project>/<session>.json
    let name = format!("{session}.json");
    let sessions = storage.join("session");
    let found = std::fs::read_dir(&sessions)
        .context(&sessions)?
        .filter_map(|d| d.ok().map(|d| d.path().join(&name)))
        .find(|p| p.exists())
        .ok_or_else(|| Error::not_found(format!("session {session}")))?;
    let info = read(&found)?;
    let mut messages = Vec::new();
    for m in sorted(&storage.join("message").join(session))? {
        let info = read(&m)?;
        let message_id = info.get("id").and_then(Value::as_str).unwrap_or("").to_string();
        let parts = match sorted(&storage.join("part").join(&message_id)) {
            Ok(files) => files.iter().map(|p| read(p)).collect::<Result<Vec<_>>>()?,
            Err(_) => Vec::new(),
        };
        messages.push(json!({ "info": info, "parts": parts }));
    }
    Ok(json!({ "info": info, "messages": messages }))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::{parse, read_storage};

    /// A session in the shapes opencode stores (message-v2.ts): a prompt with a synthetic
    /// part, a reply with reasoning, a tool call and text; a second prompt whose tool call
    /// failed; a third the person undid with /undo (`revert.messageID`).
    fn messages() -> Vec<(Value, Vec<Value>)> {
        let user = |id: &str, ms: i64, text: &str| {
            (
                json!({ "id": id, "sessionID": "ses_1", "role": "user", "time": { "created": ms } }),
                vec![
                    json!({ "id": format!("prt_{id}_a"), "type": "text", "text": text }),
                    json!({ "id": format!("prt_{id}_b"), "type": "text", "text": "Use the above message", "synthetic": true }),
                ],
            )
        };
        let assistant = |id: &str, parent: &str, ms: i64, parts: Vec<Value>| {
            (
                json!({ "id": id, "sessionID": "ses_1", "role": "assistant", "parentID": parent, "time": { "created": ms } }),
                parts,
            )
        };
        vec![
            user("msg_01", 1_764_981_943_000, "fix the bug"),
            assistant(
                "msg_02",
                "msg_01",
                1_764_981_944_000,
                vec![
                    json!({ "id": "prt_1", "type": "step-start", "snapshot": "4b825dc6" }),
                    json!({ "id": "prt_2", "type": "reasoning", "text": "look at a.ts", "time": { "start": 1 } }),
                    json!({ "id": "prt_3", "type": "tool", "callID": "toolu_1", "tool": "edit",
                        "state": { "status": "completed", "input": { "filePath": "/p/a.ts", "oldString": "x", "newString": "y" }, "output": "Edit applied successfully.", "title": "a.ts", "metadata": {}, "time": { "start": 1, "end": 2 } } }),
                    json!({ "id": "prt_4", "type": "text", "text": "Fixed." }),
                ],
            ),
            user("msg_03", 1_764_981_950_000, "now test it"),
            assistant(
                "msg_04",
                "msg_03",
                1_764_981_951_000,
                vec![json!({ "id": "prt_5", "type": "tool", "callID": "toolu_2", "tool": "bash",
                        "state": { "status": "error", "input": { "command": "npm test" }, "error": "exit 1", "time": { "start": 1, "end": 2 } } })],
            ),
            user("msg_05", 1_764_981_960_000, "delete everything"),
            assistant(
                "msg_06",
                "msg_05",
                1_764_981_961_000,
                vec![json!({ "id": "prt_6", "type": "text", "text": "Deleted." })],
            ),
        ]
    }

    fn check(text: &str) {
        let parsed = parse(text).unwrap();
        let prompts: Vec<&str> = parsed.turns.iter().map(|t| t.prompt.as_str()).collect();
        assert_eq!(prompts, ["fix the bug", "now test it"], "synthetic text and the undone turn left out");
        let first = parsed.turns[0].reply.as_ref().unwrap();
        assert_eq!((first.content.as_str(), first.thinking.as_deref()), ("Fixed.", Some("look at a.ts")));
        let calls = first.tool_calls.as_ref().unwrap();
        assert_eq!(
            (calls[0].name.as_str(), calls[0].output.clone()),
            ("edit", Some(json!("Edit applied successfully.")))
        );
        let failed = &parsed.turns[1].reply.as_ref().unwrap().tool_calls.as_ref().unwrap()[0];
        assert_eq!((failed.error, failed.output.clone()), (Some(true), Some(json!("exit 1"))));
        assert_eq!(parsed.turns[0].started_at, "2025-12-06T00:45:43Z");
    }

    #[test]
    fn the_json_files_of_older_opencode_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let storage = dir.path().join("storage");
        let write = |path: std::path::PathBuf, v: &Value| {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, v.to_string()).unwrap();
        };
        let session = json!({ "id": "ses_1", "projectID": "e7f9", "directory": "/p", "title": "t",
                              "time": { "created": 1, "updated": 2 }, "revert": { "messageID": "msg_05", "snapshot": "abc" } });
        write(storage.join("session/e7f9/ses_1.json"), &session);
        for (info, parts) in messages() {
            let id = info["id"].as_str().unwrap().to_string();
            write(storage.join(format!("message/ses_1/{id}.json")), &info);
            for p in parts {
                let mut p = p.clone();
                p["messageID"] = json!(id);
                write(storage.join(format!("part/{id}/{}.json", p["id"].as_str().unwrap())), &p);
            }
        }
        check(&read_storage(dir.path(), "ses_1").unwrap());
        assert_eq!(read_storage(dir.path(), "ses_nope").unwrap_err().code, crate::ErrorCode::NotFound);
    }

    #[test]
    fn the_database_of_newer_opencode_is_read_without_writing_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("opencode.db");
        let conn = rusqlite::Connection::open(&db).unwrap();
        // The columns turnback reads of opencode's session.sql.ts tables.
        conn.execute_batch(
            "CREATE TABLE session (id TEXT PRIMARY KEY, project_id TEXT, revert TEXT);
             CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT, time_created INTEGER, data TEXT);
             CREATE TABLE part (id TEXT PRIMARY KEY, message_id TEXT, session_id TEXT, data TEXT);",
        )
        .unwrap();
        conn.execute(
            "INSERT INTO session VALUES ('ses_1', 'e7f9', ?1)",
            [json!({ "messageID": "msg_05" }).to_string()],
        )
        .unwrap();
        for (info, parts) in messages() {
            let id = info["id"].as_str().unwrap().to_string();
            let mut data = info.clone();
            data.as_object_mut().unwrap().remove("id");
            conn.execute("INSERT INTO message VALUES (?1, 'ses_1', 0, ?2)", [&id, &data.to_string()]).unwrap();
            for p in parts {
                let pid = p["id"].as_str().unwrap().to_string();
                let mut data = p.clone();
                data.as_object_mut().unwrap().remove("id");
                conn.execute("INSERT INTO part VALUES (?1, ?2, 'ses_1', ?3)", [&pid, &id, &data.to_string()]).unwrap();
            }
        }
        drop(conn);
        let before = std::fs::read(&db).unwrap();
        check(&read_storage(dir.path(), "ses_1").unwrap());
        assert_eq!(std::fs::read(&db).unwrap(), before, "read-only");
    }

    #[test]
    fn what_is_not_an_export_is_refused() {
        assert!(parse("not json").is_err());
        assert!(parse(r#"{"sessionId": "x", "messages": 3}"#).is_err());
    }
}

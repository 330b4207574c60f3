//! Argument definitions (clap). Every command takes the global options.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Undo for AI coding agents: encrypted, crash-safe checkpoints of every file change.
#[derive(Debug, Parser)]
#[command(name = "turnback", version, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command takes.
#[derive(Debug, Clone, Args)]
pub struct Global {
    /// Print one JSON document on stdout instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// The store directory [default: $TURNBACK_HOME, else $XDG_DATA_HOME/turnback, else ~/.local/share/turnback].
    #[arg(long, global = true, value_name = "DIR")]
    pub store: Option<PathBuf>,
    /// The workspace [default: the current directory].
    #[arg(long, global = true, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// The session [default: $TURNBACK_SESSION, else the workspace's latest, else a new one].
    #[arg(long, global = true, value_name = "ID", env = "TURNBACK_SESSION")]
    pub session: Option<String>,
    /// Checkpoint retention in prompt rounds, 1-100 (overrides settings.toml).
    #[arg(long, global = true, value_name = "N")]
    pub retention_rounds: Option<u32>,
    /// Cap on one checkpoint's bytes, e.g. "100 MiB" (overrides settings.toml).
    #[arg(long, global = true, value_name = "SIZE")]
    pub checkpoint_cap: Option<String>,
    /// Cap on all retained checkpoints' bytes, e.g. "500 MiB" (overrides settings.toml).
    #[arg(long, global = true, value_name = "SIZE")]
    pub store_cap: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the store and its key, and register the workspace.
    ///
    /// Example: turnback init --workspace ~/src/app
    Init,
    /// Checkpointed file mutations (content on stdin).
    #[command(subcommand)]
    Fs(FsCommand),
    /// Record pre-images before someone else changes files; prints an operation id.
    ///
    /// Example: op=$(turnback stage src/lib.rs --kind edit); <agent edits>; turnback commit "$op"
    Stage {
        /// Files about to change.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// What is about to happen to them (checked against the files now).
        #[arg(long, value_parser = ["create", "edit", "delete"])]
        kind: Option<String>,
        /// Proceed without rollback protection if a capacity cap would be exceeded.
        #[arg(long)]
        confirm_unprotected: bool,
    },
    /// Capture post-images and commit a staged operation.
    ///
    /// Example: turnback commit 0193a0b2-...
    Commit {
        /// The operation id `stage` printed.
        operation_id: String,
        /// The mutation failed (post-images are still captured).
        #[arg(long)]
        failed: bool,
    },
    /// Take back checkpointed mutations without overwriting anyone's later work.
    ///
    /// Without --apply, previews: every target's outcome and a planId.
    /// Example: turnback rollback --turn 3 && turnback rollback --turn 3 --apply --plan <planId>
    Rollback(RollbackArgs),
    /// Sessions: one agent conversation in one workspace.
    #[command(subcommand)]
    Session(SessionCommand),
    /// Begin or end a turn (a prompt and the agent's reply).
    #[command(subcommand)]
    Turn(TurnCommand),
    /// List the session's turns: index, turnId, kind, preview, startedAt, snapshot.
    ///
    /// Example: turnback turns --json
    Turns,
    /// The session's conversation history: append, show, export, import.
    #[command(subcommand)]
    History(HistoryCommand),
    /// Run any command-line agent as one turn: a start snapshot, the command with the
    /// terminal attached (its exit code passed through), an end snapshot.
    ///
    /// Example: turnback run --prompt "fix the flaky test" -- codex exec "fix the flaky test"
    Run {
        /// The prompt (recorded in the turn and the history).
        #[arg(long)]
        prompt: Option<String>,
        /// Wait at most this long for the start snapshot (it then finishes, marked late).
        #[arg(long, value_name = "N", default_value_t = 2000)]
        wait_ms: u64,
        /// The command and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Handle one agent hook event (JSON on stdin). Never fails the agent: problems are
    /// logged to hooks.log in the store and the exit code is 0.
    ///
    /// Example: echo '{"hook_event_name":"Stop","session_id":"s1","cwd":"/src/app"}' | turnback hook claude-code
    Hook {
        /// The agent whose hook format the event is in.
        #[arg(value_enum)]
        agent: HookAgent,
    },
    /// Connect turnback to an agent: merges its hooks into the agent's settings, keeping
    /// everything else there; idempotent; --uninstall removes exactly what it added.
    ///
    /// Examples: turnback install claude-code; turnback install codex --scope user
    Install {
        /// The agent.
        #[arg(value_enum)]
        agent: HookAgent,
        /// project: the workspace's own configuration (.claude/, .codex/, .gemini/, .cursor/,
        /// .opencode/); user: the person's (~/.claude/, ~/.codex/, ~/.gemini/, ~/.cursor/,
        /// ~/.config/opencode/).
        #[arg(long, value_enum, default_value_t = Scope::Project)]
        scope: Scope,
        /// Remove turnback's hooks instead.
        #[arg(long)]
        uninstall: bool,
        /// Write through a settings file (or directory) that is a symlink leading outside the
        /// project (user scope: outside the home directory); refused without it.
        #[arg(long)]
        follow_symlinks: bool,
    },
    /// Serve the Model Context Protocol on stdio: checkpointed file tools (read_file,
    /// create_file, write_file, edit_file, delete_file) and undo tools (list_turns,
    /// list_checkpoints, rollback_preview, rollback_apply, rewind_preview, rewind_apply,
    /// diff_turn) for the workspace.
    ///
    /// Example: claude mcp add turnback -- turnback mcp --workspace ~/src/app
    Mcp,
    /// A short real story in a throwaway workspace and store: an agent's two turns, a
    /// person's edits, a rewind that leaves the person's work alone, and its undo.
    ///
    /// Example: turnback demo
    Demo,
    /// Print a shell completion script.
    ///
    /// Example: turnback completions bash > ~/.local/share/bash-completion/completions/turnback
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Internal: take a turn's start snapshot (run detached by `turn begin`).
    #[command(name = "__turn-snapshot", hide = true)]
    TurnSnapshot {
        /// The turn.
        #[arg(long)]
        turn: String,
    },
    /// Two sessions that share a fork point side by side: where their results differ, and
    /// what each changed since the fork point.
    ///
    /// Example: turnback compare claude-run codex-run --turn 2 --patch
    Compare {
        /// One session.
        session_a: String,
        /// The other.
        session_b: String,
        /// The turn whose end to compare in both [default: each session's newest turn].
        #[arg(long, value_name = "T")]
        turn: Option<u64>,
        /// Also show the unified diffs of text files.
        #[arg(long)]
        patch: bool,
    },
    /// The full-screen terminal view: sessions, turns, diffs, rewind and rollback with undo.
    ///
    /// Example: turnback ui
    Ui,
    /// What changed between two snapshots (or in a turn): paths, line counts, patches.
    ///
    /// Example: turnback diff --turn 3 --stat
    Diff {
        /// The turn to show (its start snapshot against its end, or the live tree).
        #[arg(long, value_name = "T", conflicts_with_all = ["from", "to"])]
        turn: Option<u64>,
        /// The older snapshot id.
        from: Option<String>,
        /// The newer snapshot id, or `live` for the workspace now.
        to: Option<String>,
        /// Per-file summary with +/- counts.
        #[arg(long, conflicts_with = "numstat")]
        stat: bool,
        /// Added and deleted line counts per file, tab-separated (`-` for binary).
        #[arg(long)]
        numstat: bool,
    },
    /// Take an ad hoc snapshot of the whole workspace.
    ///
    /// Example: turnback snapshot --json
    Snapshot {
        /// Walk the whole tree even if the file watcher could say what changed.
        #[arg(long)]
        full: bool,
    },
    /// Take the workspace back to the start of turn T (undoing T and every later turn).
    ///
    /// Without --apply, previews: files to restore, to delete and to leave alone, and a planId.
    /// Example: turnback rewind --to 3 && turnback rewind --to 3 --apply --plan <planId>
    Rewind {
        /// The turn (index) to go back to the start of.
        #[arg(long, value_name = "T")]
        to: u64,
        /// Apply (without it, only preview).
        #[arg(long)]
        apply: bool,
        /// Apply only if the plan made now still has this id.
        #[arg(long, value_name = "PLANID", requires = "apply")]
        plan: Option<String>,
        /// Rewind this path even though it was edited by hand (its current content is kept
        /// in the rewind's checkpoint).
        #[arg(long, value_name = "PATH")]
        force: Vec<PathBuf>,
    },
    /// List the session's checkpoints.
    ///
    /// Example: turnback checkpoints --turn 3
    Checkpoints {
        /// Only those made in this prompt round.
        #[arg(long, value_name = "T")]
        turn: Option<u64>,
        /// Include incomplete, recovery-locked and evicted records.
        #[arg(long)]
        all: bool,
    },
    /// Show one checkpoint: targets, coverage, integrity, encryption, retention.
    ///
    /// Example: turnback inspect 0193a0b2-...
    Inspect {
        /// Checkpoint id.
        id: String,
    },
    /// Is turnback ready, and does each agent reach it? The store and key, each agent's
    /// hooks (project and user), the last event each delivered, hook failures — with advice
    /// for every problem (exit 1 if there is one). Changes nothing.
    ///
    /// Example: turnback doctor
    Doctor,
    /// Check every record of the store; --deep decrypts every object.
    ///
    /// Example: turnback verify --deep
    Verify {
        /// Decrypt and check every object and record.
        #[arg(long)]
        deep: bool,
    },
    /// Recover from interrupted operations (also runs before every command).
    ///
    /// Example: turnback reconcile
    Reconcile,
    /// Evict checkpoints past retention and reclaim unreferenced space; with --remote,
    /// remove from a remote what no manifest names (after a grace period).
    ///
    /// Example: turnback gc   or   turnback gc --remote team
    Gc {
        /// Collect on this remote instead of the local store.
        #[cfg(feature = "remote")]
        #[arg(long, value_name = "NAME")]
        remote: Option<String>,
        /// With --remote: keep unnamed objects younger than this many seconds (a push may
        /// be about to name them) [default: 3600].
        #[cfg(feature = "remote")]
        #[arg(long, value_name = "SECS", requires = "remote")]
        grace_secs: Option<u64>,
    },
    /// Show store usage by kind.
    ///
    /// Example: turnback du --json
    Du,
    /// The master key and data keys.
    #[command(subcommand)]
    Key(KeyCommand),
    /// S3-compatible remotes sessions are pushed to and pulled from (credentials from the
    /// AWS environment variables or ~/.aws/credentials, never stored).
    #[cfg(feature = "remote")]
    #[command(subcommand)]
    Remote(RemoteCommand),
    /// Upload a session (--session, default the workspace's latest; --all: every session
    /// of the store) to a remote: only what it lacks, encrypted.
    ///
    /// Example: turnback push team --session agent-42
    #[cfg(feature = "remote")]
    Push {
        /// The remote (default: the only one configured).
        name: Option<String>,
        /// Push every session of the store.
        #[arg(long)]
        all: bool,
    },
    /// Bring a session (--session ID, or --all) from a remote into the store, verified;
    /// a new session joins the workspace. Never writes workspace files.
    ///
    /// Example: turnback pull team --session agent-42
    #[cfg(feature = "remote")]
    Pull {
        /// The remote (default: the only one configured).
        name: Option<String>,
        /// Pull every session the remote holds.
        #[arg(long)]
        all: bool,
    },
    /// The file watcher behind O(changes) snapshots (one per workspace, in the background).
    #[command(subcommand)]
    Watch(WatchCommand),
}

#[derive(Debug, Subcommand)]
pub enum WatchCommand {
    /// Start the workspace's watcher unless one runs (`turn begin` does this itself when
    /// `[snapshots] watch = "auto"`).
    ///
    /// Example: turnback watch start
    Start,
    /// Stop the workspace's watcher.
    ///
    /// Example: turnback watch stop
    Stop,
    /// Whether a watcher runs, and what it holds.
    ///
    /// Example: turnback watch status --json
    Status,
    /// Internal: be the watcher (started detached by `watch start` and `turn begin`).
    #[command(hide = true)]
    Run,
}

#[derive(Debug, Subcommand)]
#[cfg(feature = "remote")]
pub enum RemoteCommand {
    /// Add a remote.
    ///
    /// Example: turnback remote add team s3://agents-bucket/turnback --endpoint http://127.0.0.1:3900 --region garage
    Add {
        /// Its name.
        name: String,
        /// s3://BUCKET/PREFIX
        url: String,
        /// The S3 endpoint (MinIO, Garage, R2, Ceph...) [default: AWS].
        #[arg(long, value_name = "URL")]
        endpoint: Option<String>,
        /// The region [default: $AWS_REGION, else $AWS_DEFAULT_REGION].
        #[arg(long, value_name = "R")]
        region: Option<String>,
    },
    /// The configured remotes.
    ///
    /// Example: turnback remote list
    List,
    /// Forget a remote (its bucket is not touched).
    ///
    /// Example: turnback remote remove team
    Remove {
        /// Its name.
        name: String,
    },
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct RollbackArgs {
    #[command(subcommand)]
    pub command: Option<RollbackCommand>,
    /// Checkpoint ids to take back.
    pub ids: Vec<String>,
    /// Every checkpoint of this prompt round.
    #[arg(long, value_name = "T", conflicts_with_all = ["ids", "since_turn", "agent"])]
    pub turn: Option<u64>,
    /// Every checkpoint from this prompt round on.
    #[arg(long, value_name = "T", conflicts_with_all = ["ids", "agent"])]
    pub since_turn: Option<u64>,
    /// Every checkpoint a sub-agent made (its id, as `checkpoints` shows it).
    #[arg(long, value_name = "ID", conflicts_with = "ids")]
    pub agent: Option<String>,
    /// Apply (without it, only preview).
    #[arg(long)]
    pub apply: bool,
    /// Apply only if the analysis still has this planId (from the preview).
    #[arg(long, value_name = "PLANID", requires = "apply")]
    pub plan: Option<String>,
    /// For a path: skip it, export a sanitized patch, or write a merge to resolve.
    #[arg(long = "choose", value_name = "PATH=skip|patch|resolve")]
    pub choose: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum RollbackCommand {
    /// Apply your edited merge file (from --choose PATH=resolve) through the checked path.
    ///
    /// Example: turnback rollback resolve src/main.rs
    Resolve {
        /// The file whose merge you edited.
        path: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub enum FsCommand {
    /// Create a new file with the content on stdin (fails if it exists).
    ///
    /// Example: echo 'fn main() {}' | turnback fs create src/main.rs
    Create(FsTarget),
    /// Create or overwrite a file with the content on stdin.
    ///
    /// Example: turnback fs write README.md < new-readme.md
    Write(FsTarget),
    /// Replace an exact string that occurs once (or every occurrence with --all).
    ///
    /// Example: turnback fs edit src/main.rs --old 'println!("hi")' --new 'println!("hello")'
    Edit {
        #[command(flatten)]
        target: FsTarget,
        /// The exact text to replace.
        #[arg(long, allow_hyphen_values = true)]
        old: String,
        /// The replacement.
        #[arg(long, allow_hyphen_values = true)]
        new: String,
        /// Replace every occurrence instead of requiring exactly one.
        #[arg(long)]
        all: bool,
    },
    /// Delete a file.
    ///
    /// Example: turnback fs delete build.log
    Delete(FsTarget),
}

#[derive(Debug, Args)]
pub struct FsTarget {
    /// The file (relative to the current directory, inside the workspace).
    pub path: PathBuf,
    /// Proceed without rollback protection if a capacity cap would be exceeded.
    #[arg(long)]
    pub confirm_unprotected: bool,
}

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Start a new session in the workspace (it becomes the workspace's latest).
    ///
    /// Example: turnback session new --id my-task
    New {
        /// Its id (default: a fresh UUID v7).
        #[arg(long)]
        id: Option<String>,
    },
    /// The workspace's sessions; with --remote, the sessions a remote holds.
    ///
    /// Example: turnback session list   or   turnback session list --remote team
    List {
        /// List this remote's sessions instead.
        #[cfg(feature = "remote")]
        #[arg(long, value_name = "NAME")]
        remote: Option<String>,
    },
    /// One session: turns, snapshots, checkpoints.
    ///
    /// Example: turnback session show
    Show {
        /// The session (default: the current one).
        id: Option<String>,
    },
    /// Fork a session after a turn: the new session carries its turns and snapshots (and
    /// outlives it); --into DIR also writes the files as they were right after that turn
    /// into DIR, a separate working tree.
    ///
    /// Example: turnback session fork --from main-task --after-turn 3 --into ../try-b
    Fork {
        /// The session to fork.
        #[arg(long)]
        from: String,
        /// Carry turns 1..T (default: all).
        #[arg(long, value_name = "T")]
        after_turn: Option<u64>,
        /// Materialise the files into this new (or empty) directory, the fork's workspace:
        /// outside the workspace and any .git, reached through no symlink.
        #[arg(long, value_name = "DIR")]
        into: Option<PathBuf>,
        /// The new session's id (default: a fresh UUID v7).
        #[arg(long)]
        id: Option<String>,
    },
    /// Delete a session with its turns, snapshots and checkpoints.
    ///
    /// Example: turnback session delete old-task
    Delete {
        /// The session.
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum HistoryCommand {
    /// Append entries read from stdin: one JSON object, an array of them, or JSON lines.
    /// Fields: role (user|assistant), content, and optionally turnId (default: the running
    /// turn, else the newest), prompt, thinking, toolCalls [{name, input, output}],
    /// background, at. Each entry is durable once appended; caps are applied and noted.
    ///
    /// Example: echo '{"role":"user","content":"fix the test"}' | turnback history append
    Append,
    /// Show the history: all of it, one turn, or a tail widened to start at a user entry
    /// (marked partial).
    ///
    /// Example: turnback history show --tail 20
    Show {
        /// Only turn T (its index or id).
        #[arg(long, value_name = "T", conflicts_with = "tail")]
        turn: Option<String>,
        /// Only the newest N entries (more, to start at a user entry).
        #[arg(long, value_name = "N")]
        tail: Option<usize>,
    },
    /// Export the history: `jsonl` (one entry per line) or `messages` (a role/content array
    /// to seed a stateless model API). A file written with --output is owner-only (0600).
    ///
    /// Example: turnback history export --format messages --output context.json
    Export {
        /// The format.
        #[arg(long, value_enum, default_value_t = ExportFormat::Jsonl)]
        format: ExportFormat,
        /// Write to this file instead of stdout.
        #[arg(long, short, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Bring an agent's own transcript of the session into its history and turns: turns
    /// the hooks recorded get their replies, the others become turns of their own;
    /// re-running adds only what the transcript gained since.
    ///
    /// Example: turnback history import --claude-code ~/.claude/projects/-src-app/3f2c….jsonl
    #[command(group(clap::ArgGroup::new("source").required(true)))]
    Import {
        /// A Claude Code session transcript (~/.claude/projects/…/<session>.jsonl).
        #[arg(long, value_name = "TRANSCRIPT", group = "source")]
        claude_code: Option<PathBuf>,
        /// A Codex CLI rollout (~/.codex/sessions/YYYY/MM/DD/rollout-….jsonl).
        #[arg(long, value_name = "ROLLOUT", group = "source")]
        codex: Option<PathBuf>,
        /// A Gemini CLI chat file (~/.gemini/tmp/<project>/chats/session-….jsonl or .json).
        #[arg(long, value_name = "CHAT", group = "source")]
        gemini: Option<PathBuf>,
        /// An opencode session, by id (read from opencode's storage), or a file that
        /// `opencode export` wrote.
        #[arg(long, value_name = "SESSION_ID|FILE", group = "source")]
        opencode: Option<String>,
        /// opencode's data directory (default: $XDG_DATA_HOME/opencode, else
        /// ~/.local/share/opencode).
        #[arg(long, value_name = "DIR", requires = "opencode")]
        opencode_data: Option<PathBuf>,
    },
}

/// Agents with hook integrations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum HookAgent {
    /// Claude Code.
    ClaudeCode,
    /// OpenAI's Codex CLI.
    Codex,
    /// Google's Gemini CLI.
    Gemini,
    /// Cursor's agent.
    Cursor,
    /// opencode.
    Opencode,
}

/// Where an agent's settings live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scope {
    /// The workspace's own settings.
    Project,
    /// The user's settings, for every project.
    User,
}

/// History export formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// One entry per line, every field.
    Jsonl,
    /// A JSON array of {role, content}.
    Messages,
}

#[derive(Debug, Subcommand)]
pub enum TurnCommand {
    /// Begin a turn: records it with a start snapshot; prints the turn id. A begin while a
    /// turn runs joins it (same id) unless --new; --background turns get their own id.
    ///
    /// Example: turnback turn begin --prompt "fix the failing test"
    Begin {
        /// The prompt (its first line becomes the preview).
        #[arg(long, conflicts_with = "prompt_file")]
        prompt: Option<String>,
        /// Read the prompt from this file.
        #[arg(long, value_name = "F")]
        prompt_file: Option<PathBuf>,
        /// A background turn (work the agent started on its own).
        #[arg(long)]
        background: bool,
        /// Start a new turn even if one is running.
        #[arg(long)]
        new: bool,
        /// Wait at most this long for the start snapshot; past that the turn starts and the
        /// snapshot finishes in a detached process, marked late.
        #[arg(long, value_name = "N", default_value_t = 2000)]
        wait_ms: u64,
    },
    /// End the running turn, with its end snapshot.
    ///
    /// Example: turnback turn end
    End,
    /// Record a shell command the agent ran in the running turn (secrets redacted): its
    /// effects are never reversible, and rewind plans name it.
    ///
    /// Example: turnback turn shell "npm install left-pad"
    Shell {
        /// The command as it was run.
        command: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Where the master key comes from, and what each data-key version holds.
    ///
    /// Example: turnback key status
    Status,
    /// Add a data-key version for new writes; --reencrypt rewrites old data under it.
    ///
    /// Example: turnback key rotate --reencrypt
    Rotate {
        /// Re-encrypt everything under the new version (safe to interrupt and re-run).
        #[arg(long)]
        reencrypt: bool,
    },
    /// Print the master key (one line of base64, as TURNBACK_KEY holds it), checked
    /// against the store: another machine with it reads what this one pushed.
    ///
    /// Example: turnback key export > team.key
    Export,
    /// Write a master key printed by `key export` (from FILE, or stdin) into this
    /// machine's key file ($TURNBACK_KEY_FILE, else ~/.config/turnback/master.key).
    ///
    /// Example: turnback key import team.key
    Import {
        /// The file holding the key [default: stdin].
        file: Option<PathBuf>,
    },
}

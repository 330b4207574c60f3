//! Which hook commands in an agent's configuration are turnback's: the one decision every
//! installer, uninstall and doctor's count of Codex's trusted hooks take.
//!
//! A command is turnback's hook for an agent when one of the commands it runs, read as the
//! shell reads it, is `turnback hook AGENT`: a program named `turnback` at any path (bare,
//! absolute, relative, quoted), with `hook AGENT` and any of turnback's global options as
//! its arguments (read by turnback's own argument parser), perhaps behind variable
//! assignments, `exec` or `env`, perhaps inside `sh -c`/`bash -c` (and dash, zsh, ksh) with
//! the script quoted either way, perhaps with redirections and other commands around it
//! (`2>/dev/null || true`). A command that merely mentions turnback is not: `echo turnback
//! hook claude-code` (an argument), `turnback-other hook claude-code` (another program),
//! `mytool --then turnback hook claude-code`, text the shell would not split as written (an
//! unterminated quote).
//!
//! Written as turnback writes it (`PATH hook AGENT`, for Gemini CLI followed by
//! `2>/dev/null || true`), the hook is turnback's to keep current: installing again brings
//! its command, timeout and matcher up to date where it stands (so a moved binary is
//! followed) and removes a second copy of it. In any other form the person wrote it: an
//! install takes it as the hook being installed already and leaves it as it is (it adds
//! none beside it, and removes the copies turnback wrote beside it). Uninstalling removes
//! turnback's hook in every form recognised here, the person's included: what install takes
//! for turnback's hook is what uninstall takes out, so that after it the agent runs no
//! turnback hook from that file (the file then differs from before the install only if
//! the person had written such a form before it).

use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::sync::OnceLock;

use clap::Parser;

use crate::cli::{Cli, Command, HookAgent};

/// turnback's hook, found in an agent's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnCommand {
    /// The agent whose events it handles (`turnback hook AGENT`).
    pub agent: HookAgent,
    /// Written as turnback writes it (any path, any quoting): installing keeps it current.
    /// Otherwise it is the person's form, kept as it is.
    pub as_written: bool,
}

/// How deep `sh -c` scripts inside `sh -c` scripts are read.
const MAX_DEPTH: usize = 4;

/// Whether `command` runs turnback's hook, for which agent, and in which form (see the
/// module's header).
pub fn recognise(command: &str) -> Option<OwnCommand> {
    let tokens = tokens(command)?;
    let agent = runs_hook(&tokens, 0)?;
    Some(OwnCommand { agent, as_written: as_written(&tokens, agent) })
}

/// Which of turnback's hooks found on one event (`found`, in order) stays when installing:
/// the first the person wrote in a form of their own, else the first written as turnback
/// writes it. `None`: there is none.
pub fn stays(found: &[OwnCommand]) -> Option<usize> {
    found.iter().position(|c| !c.as_written).or((!found.is_empty()).then_some(0))
}

/// A piece of a shell command line.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// A word, its quotes and escapes taken off.
    Word(String),
    /// What separates commands: `;`, `&`, `&&`, `|`, `||`, `(`, `)`, a newline.
    Op(String),
    /// A redirection operator (`>`, `2>`, `>>`, `&>`, `<`, `>&`…): the next word is its
    /// target, not an argument.
    Redirect(String),
}

/// The tokens of `line` as a POSIX shell splits it (quotes, backslashes, comments,
/// operators, redirections; expansions are left as they are written). `None`: a quote is
/// left open.
fn tokens(line: &str) -> Option<Vec<Token>> {
    let mut out = Vec::new();
    let mut word = String::new();
    // Whether a word has begun (`''` is a word, though empty).
    let mut in_word = false;
    // Whether the word so far came without quotes (a file descriptor number, `2>`).
    let mut bare = true;
    let mut chars = line.chars().peekable();
    let end_word = |out: &mut Vec<Token>, word: &mut String, in_word: &mut bool, bare: &mut bool| {
        if *in_word {
            out.push(Token::Word(std::mem::take(word)));
        }
        *in_word = false;
        *bare = true;
    };
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => end_word(&mut out, &mut word, &mut in_word, &mut bare),
            '\n' => {
                end_word(&mut out, &mut word, &mut in_word, &mut bare);
                out.push(Token::Op(";".into()));
            }
            '#' if !in_word => {
                while chars.peek().is_some_and(|&c| c != '\n') {
                    chars.next();
                }
            }
            '\'' => {
                (in_word, bare) = (true, false);
                loop {
                    match chars.next()? {
                        '\'' => break,
                        c => word.push(c),
                    }
                }
            }
            '"' => {
                (in_word, bare) = (true, false);
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => match chars.next()? {
                            '\n' => {}
                            c @ ('$' | '`' | '"' | '\\') => word.push(c),
                            c => {
                                word.push('\\');
                                word.push(c);
                            }
                        },
                        c => word.push(c),
                    }
                }
            }
            '\\' => match chars.next() {
                Some('\n') => {}
                Some(c) => {
                    (in_word, bare) = (true, false);
                    word.push(c);
                }
                None => {}
            },
            '<' | '>' => {
                // Digits just before, unquoted, name the file descriptor: part of the operator.
                let fd = in_word && bare && word.chars().all(|c| c.is_ascii_digit());
                let mut op = if fd { std::mem::take(&mut word) } else { String::new() };
                if fd {
                    in_word = false;
                }
                end_word(&mut out, &mut word, &mut in_word, &mut bare);
                op.push(c);
                while let Some(&next) = chars.peek().filter(|&&n| matches!(n, '<' | '>' | '&' | '|')) {
                    op.push(next);
                    chars.next();
                }
                out.push(Token::Redirect(op));
            }
            '&' if chars.peek() == Some(&'>') => {
                end_word(&mut out, &mut word, &mut in_word, &mut bare);
                let mut op = String::from("&");
                while let Some(&next) = chars.peek().filter(|&&n| n == '>') {
                    op.push(next);
                    chars.next();
                }
                out.push(Token::Redirect(op));
            }
            ';' | '&' | '|' | '(' | ')' => {
                end_word(&mut out, &mut word, &mut in_word, &mut bare);
                let mut op = String::from(c);
                if let Some(&next) =
                    chars.peek().filter(|&&n| (n == c && c != '(' && c != ')') || (c == '|' && n == '&'))
                {
                    op.push(next);
                    chars.next();
                }
                out.push(Token::Op(op));
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    end_word(&mut out, &mut word, &mut in_word, &mut bare);
    Some(out)
}

/// The simple commands of `tokens`: each one's words, redirections and their targets left
/// out.
fn simple_commands(tokens: &[Token]) -> Vec<Vec<&str>> {
    let mut commands = vec![Vec::new()];
    let mut tokens = tokens.iter();
    while let Some(token) = tokens.next() {
        match token {
            Token::Word(w) => commands.last_mut().expect("never empty").push(w.as_str()),
            Token::Op(_) => commands.push(Vec::new()),
            Token::Redirect(_) => {
                tokens.next();
            }
        }
    }
    commands.retain(|c| !c.is_empty());
    commands
}

/// The agent of the first of the commands in `tokens` that runs turnback's hook.
fn runs_hook(tokens: &[Token], depth: usize) -> Option<HookAgent> {
    simple_commands(tokens).into_iter().find_map(|words| hook_of(&words, depth))
}

/// The agent whose hook the simple command `words` runs, through what runs a program in
/// its place (reserved words, variable assignments, `exec`, `env`, `sh -c`).
fn hook_of(mut words: &[&str], depth: usize) -> Option<HookAgent> {
    loop {
        let (&first, rest) = words.split_first()?;
        let program = Path::new(first).file_name().and_then(|n| n.to_str()).unwrap_or(first);
        match program {
            "!" | "{" | "if" | "then" | "else" | "elif" | "while" | "until" | "do" | "time" => words = rest,
            _ if is_assignment(first) => words = rest,
            "exec" if first == program => words = skip_options(rest, &["-a"]),
            "env" => words = skip_options(rest, &["-u", "--unset", "-C", "--chdir"]),
            "sh" | "bash" | "dash" | "zsh" | "ksh" => return shell_script(rest, depth),
            _ if is_turnback(first) => {
                let parsed = Cli::try_parse_from(std::iter::once("turnback").chain(rest.iter().copied())).ok()?;
                return match parsed.command {
                    Command::Hook { agent } => Some(agent),
                    _ => None,
                };
            }
            _ => return None,
        }
    }
}

/// Whether the program `word` names is turnback: any path to a file named `turnback`, or
/// named as this binary is (a build that is not called `turnback` writes its own name).
fn is_turnback(word: &str) -> bool {
    static OWN: OnceLock<Option<OsString>> = OnceLock::new();
    let own = OWN.get_or_init(|| super::own_exe().ok().and_then(|e| e.file_name().map(OsStr::to_os_string)));
    Path::new(word).file_name().is_some_and(|n| n == "turnback" || Some(n) == own.as_deref())
}

/// `NAME=value`, as a shell takes it before a command.
fn is_assignment(word: &str) -> bool {
    let Some((name, _)) = word.split_once('=') else { return false };
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `words` after the options (and `env`'s assignments) that come before a program: each
/// option in `with_value` takes the next word too.
fn skip_options<'a, 'b>(mut words: &'a [&'b str], with_value: &[&str]) -> &'a [&'b str] {
    while let Some((&w, rest)) = words.split_first() {
        if w == "--" {
            return rest;
        }
        if !(w.starts_with('-') || is_assignment(w)) {
            break;
        }
        words = if with_value.contains(&w) { rest.get(1..).unwrap_or_default() } else { rest };
    }
    words
}

/// The hook a shell run as `sh [options] -c SCRIPT [name args…]` runs; a shell run without
/// `-c` reads a file or its input, which is not read here.
fn shell_script(mut words: &[&str], depth: usize) -> Option<HookAgent> {
    if depth >= MAX_DEPTH {
        return None;
    }
    let mut command = false;
    while let Some((&w, rest)) = words.split_first() {
        match w {
            "--" => {
                words = rest;
                break;
            }
            "-o" | "+o" | "-O" | "+O" => words = rest.get(1..).unwrap_or_default(),
            _ if w.starts_with("--") => words = rest,
            _ if w.len() > 1 && (w.starts_with('-') || w.starts_with('+')) => {
                command |= w.starts_with('-') && w.contains('c');
                words = rest;
            }
            _ => break,
        }
    }
    let script = words.first().filter(|_| command)?;
    runs_hook(&tokens(script)?, depth + 1)
}

/// Whether `tokens` are the command as turnback writes it for `agent`: one program, `hook`,
/// the agent's name, then nothing, or (Gemini CLI's form) `2>/dev/null || true`.
fn as_written(tokens: &[Token], agent: HookAgent) -> bool {
    let name = crate::commands::hook::agent_name(agent);
    let word = |w: &str| Token::Word(w.to_string());
    let (head, tail) = tokens.split_at(tokens.len().min(3));
    // A program named through an expansion (`$HOME/bin/turnback`) is the person's way.
    let written = matches!(head, [Token::Word(program), hook, a]
        if is_turnback(program) && !program.contains(['$', '`']) && *hook == word("hook") && *a == word(name));
    let quiet = [Token::Redirect("2>".into()), word("/dev/null"), Token::Op("||".into()), word("true")];
    written && (tail.is_empty() || tail == quiet)
}

#[cfg(test)]
mod tests {
    use super::{OwnCommand, recognise};
    use crate::cli::HookAgent;

    #[test]
    fn every_form_of_turnbacks_hook_is_recognised_and_nothing_that_only_mentions_it() {
        use HookAgent::{ClaudeCode, Codex, Cursor, Gemini};
        let written = |agent| Some(OwnCommand { agent, as_written: true });
        let persons = |agent| Some(OwnCommand { agent, as_written: false });
        let table: &[(&str, Option<OwnCommand>)] = &[
            // As turnback writes them.
            ("turnback hook claude-code", written(ClaudeCode)),
            ("/usr/local/bin/turnback hook claude-code", written(ClaudeCode)),
            ("'/opt/my tools/turnback' hook cursor", written(Cursor)),
            ("\"/opt/my tools/turnback\" hook claude-code", written(ClaudeCode)),
            ("/opt/my\\ tools/turnback hook claude-code", written(ClaudeCode)),
            ("./bin/turnback hook codex", written(Codex)),
            ("turnback hook gemini 2>/dev/null || true", written(Gemini)),
            ("'/home/a b/.cargo/bin/turnback' hook gemini 2>/dev/null || true", written(Gemini)),
            ("turnback  hook\tclaude-code  # turnback's", written(ClaudeCode)),
            // As a person may write them.
            ("sh -c 'exec turnback hook claude-code'", persons(ClaudeCode)),
            ("sh -c \"turnback hook claude-code\"", persons(ClaudeCode)),
            ("/bin/bash -lc 'turnback hook codex'", persons(Codex)),
            ("bash -e -c 'cd \"$CLAUDE_PROJECT_DIR\" && exec turnback hook claude-code'", persons(ClaudeCode)),
            ("sh -c 'sh -c \"turnback hook claude-code\"'", persons(ClaudeCode)),
            ("exec turnback hook claude-code", persons(ClaudeCode)),
            ("env X=1 turnback hook claude-code", persons(ClaudeCode)),
            ("/usr/bin/env -u TURNBACK_SESSION turnback hook codex", persons(Codex)),
            ("TURNBACK_HOME=/srv/tb turnback hook claude-code", persons(ClaudeCode)),
            ("turnback --store /srv/tb hook claude-code", persons(ClaudeCode)),
            ("turnback hook --json claude-code", persons(ClaudeCode)),
            ("turnback hook claude-code > /tmp/log 2>&1", persons(ClaudeCode)),
            ("turnback hook gemini 2>/dev/null", persons(Gemini)),
            ("turnback hook claude-code || true", persons(ClaudeCode)),
            ("cd /src/app && turnback hook claude-code", persons(ClaudeCode)),
            ("$HOME/.cargo/bin/turnback hook claude-code", persons(ClaudeCode)),
            ("if true; then turnback hook cursor; fi", persons(Cursor)),
            // Not turnback's hook.
            ("echo turnback hook claude-code", None),
            ("turnback-other hook claude-code", None),
            ("/usr/bin/turnback-other hook claude-code", None),
            ("mytool --then turnback hook claude-code", None),
            ("mytool --then turnback", None),
            ("my-linter --check", None),
            ("notify-send 'turnback hook claude-code'", None),
            ("sh -c 'echo turnback hook claude-code'", None),
            ("sh script.sh turnback hook claude-code", None),
            ("sh -c", None),
            ("turnback hook", None),
            ("turnback hook nobody", None),
            ("turnback hook claude-code extra", None),
            ("turnback install claude-code", None),
            ("turnback", None),
            ("sh -c 'turnback hook claude-code", None),
            ("# turnback hook claude-code", None),
            ("\"turnback hook claude-code\"", None),
            ("", None),
        ];
        for (command, expected) in table {
            assert_eq!(recognise(command), *expected, "{command}");
        }
    }

    #[test]
    fn the_command_install_writes_is_recognised_as_written_for_every_agent() {
        for agent in [HookAgent::ClaudeCode, HookAgent::Codex, HookAgent::Gemini, HookAgent::Cursor] {
            let command = super::super::hook_command(agent).unwrap();
            for command in [command.clone(), format!("{command} 2>/dev/null || true")] {
                assert_eq!(recognise(&command), Some(OwnCommand { agent, as_written: true }), "{command}");
            }
        }
    }
}

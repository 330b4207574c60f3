//! Redaction of secrets in text turnback records but did not write itself (shell commands
//! an agent ran): values that look like passwords, tokens or keys become `[redacted]`.
//!
//! Invariants: only the secret value is replaced, never the command's shape; the result
//! never contains a matched value; redacting twice changes nothing more.

use std::sync::OnceLock;

use regex::Regex;

const MARK: &str = "[redacted]";

/// One argument's value: quoted whole, or up to the next space; not a shell operator
/// (`docker login --password-stdin < file` names no value).
const VALUE: &str = r#"(?:'[^']*'|"[^"]*"|[^\s<>|;&]\S*)"#;

/// The rest of one command of a line (up to `|`, `;`, `&` or the line's end), lazily: a
/// flag only one program gives a secret meaning is looked for after that program's name.
const SAME_COMMAND: &str = r"[^|;&\n]*?";

fn rules() -> &'static [(Regex, &'static str)] {
    static RULES: OnceLock<Vec<(Regex, &'static str)>> = OnceLock::new();
    RULES.get_or_init(|| {
        // `auth` but not `author`; words joined by `_` or `-` (DB_PASSWORD, --client-secret,
        // AWS_ACCESS_KEY_ID).
        let word = r"(?:api[_-]?key|access[_-]?key|secret|token|passw(?:or)?d|pwd|auth(?:[^o]|$)|credentials?)";
        let named = format!(r"[A-Za-z0-9_-]*{word}[A-Za-z0-9_-]*");
        let (v, cmd) = (VALUE, SAME_COMMAND);
        [
            // "name": "value" (the JSON arguments of an MCP tool call)
            (format!(r#"(?i)("{named}"\s*:\s*)"(?:[^"\\]|\\.)*""#), "${1}\"[redacted]\""),
            // NAME=value: environment assignments (PGPASSWORD=… psql, AWS_SECRET_ACCESS_KEY=…),
            // config flags (--password=…)
            (format!(r"(?i)\b({named})={v}"), "${1}=[redacted]"),
            // --password value, --token=value, --api-key value, --secret value
            (format!(r"(?i)(--{named})(=|\s+){v}"), "${1}${2}[redacted]"),
            // mysql -pSECRET (attached only: `mysql -p db` asks for it and names a database)
            (format!(r"(\b(?:mysql|mariadb)[a-z-]*{cmd}\s-p)\S+"), "${1}[redacted]"),
            // docker login -p SECRET, sshpass -p SECRET ssh host (`ls -p` is left alone)
            (format!(r"(\b(?:docker\s+login|sshpass){cmd}\s-p)(\s*){v}"), "${1}${2}[redacted]"),
            // redis-cli -a SECRET, redis-cli --pass SECRET (`grep -a` is left alone)
            (format!(r"(\bredis-cli{cmd}\s(?:-a|--pass))(\s+|=){v}"), "${1}${2}[redacted]"),
            // aws configure set aws_secret_access_key SECRET (and aws_session_token, …)
            (
                format!(
                    r"(?i)(\baws\s+configure\s+set\s+[A-Za-z0-9_.-]*(?:secret|token|access_key)[A-Za-z0-9_.-]*\s+){v}"
                ),
                "${1}[redacted]",
            ),
            // Authorization: Bearer/Basic/Token … (headers)
            (r"(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9._~+/=:-]+".to_string(), "${1}${2}[redacted]"),
            // X-Api-Key: …, X-Auth-Token: … (headers)
            (r"(?i)\b([A-Za-z0-9-]*(?:api-?key|token|secret)\s*:\s*)[^\s'\x22]+".to_string(), "${1}[redacted]"),
            // 'Cookie: session=…; theme=…' and Set-Cookie (a quoted header: all of its value)
            (r#"(?i)(['"](?:set-)?cookie\s*:\s*)[^'"\n]+"#.to_string(), "${1}[redacted]"),
            // Cookie:session=… (an unquoted header: one word)
            (r#"(?i)(\b(?:set-)?cookie:)[^\s'"]+"#.to_string(), "${1}[redacted]"),
            // curl -u user:password, --user user:password (the user name stays)
            (r#"(\s(?:-u|--user)(?:\s+|=)['"]?[^\s:'"]+:)[^\s'"]+"#.to_string(), "${1}[redacted]"),
            // https://user:password@host (git clone, curl)
            (r"(://[^/\s:@]+:)[^/\s@]+@".to_string(), "${1}[redacted]@"),
            // AWS access key ids, long-lived (AKIA) and temporary (ASIA), anywhere
            (r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b".to_string(), MARK),
            // GitHub tokens: ghp_, gho_, ghu_, ghs_, ghr_ and fine-grained github_pat_
            (r"\bgh[pousr]_[A-Za-z0-9]{20,}".to_string(), MARK),
            (r"\bgithub_pat_[A-Za-z0-9_]{20,}".to_string(), MARK),
            // OpenAI and Anthropic API keys (sk-…, sk-proj-…, sk-ant-…)
            (r"\bsk-[A-Za-z0-9_-]{16,}".to_string(), MARK),
            // Slack tokens (xoxb-, xoxp-, …)
            (r"\bxox[abposr]-[A-Za-z0-9-]{10,}".to_string(), MARK),
            // PEM private keys, to their end (or the text's)
            (r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$)".to_string(), MARK),
        ]
        .into_iter()
        .map(|(pattern, with)| (Regex::new(&pattern).expect("valid redaction pattern"), with))
        .collect()
    })
}

/// `text` with every secret-looking value replaced by `[redacted]`.
pub(crate) fn redact(text: &str) -> String {
    let mut out = text.to_string();
    for (pattern, with) in rules() {
        out = pattern.replace_all(&out, *with).into_owned();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::redact;

    /// Each input redacted is the expected text, and redacting that again changes nothing.
    fn check(cases: &[(&str, &str)]) {
        for (input, expected) in cases {
            assert_eq!(redact(input), *expected, "{input}");
            assert_eq!(redact(&redact(input)), *expected, "idempotent: {input}");
        }
    }

    #[test]
    fn secret_values_go_and_the_command_stays() {
        check(&[
            ("GITHUB_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz0123 gh pr list", "GITHUB_TOKEN=[redacted] gh pr list"),
            ("mysql --password='s3cr3t pass' db", "mysql --password=[redacted] db"),
            ("deploy --api-key sk-live1234567890abcdef", "deploy --api-key [redacted]"),
            ("curl -H 'Authorization: Bearer abc.def.ghi' x", "curl -H 'Authorization: Bearer [redacted]' x"),
            ("git clone https://me:hunter2@example.com/r.git", "git clone https://me:[redacted]@example.com/r.git"),
            ("aws s3 ls # AKIAABCDEFGHIJKLMNOP", "aws s3 ls # [redacted]"),
            ("cargo test --workspace", "cargo test --workspace"),
            (
                "app --db-password hunter2 --client-secret s3 --auth-token t",
                "app --db-password [redacted] --client-secret [redacted] --auth-token [redacted]",
            ),
            (
                "curl -H 'Authorization: Basic dXNlcjpwYXNz' -H 'X-Api-Key: abc123' x",
                "curl -H 'Authorization: Basic [redacted]' -H 'X-Api-Key: [redacted]' x",
            ),
            ("curl -u ann:hunter2 https://x", "curl -u ann:[redacted] https://x"),
            (
                r#"mcp__github__create_file {"path":"x","api_token":"t0p \"s\" ecret","n":1}"#,
                r#"mcp__github__create_file {"path":"x","api_token":"[redacted]","n":1}"#,
            ),
            ("git commit --author 'Ann <a@b.c>' -m fix", "git commit --author 'Ann <a@b.c>' -m fix"),
        ]);
        assert!(!redact("export DB_PASSWORD=\"p a s s\"").contains("p a s s"));
    }

    /// Command lines as agents run them: the secret (always `S3cret`, or a token of its
    /// provider's shape) goes; the program, its other arguments and flags that only look
    /// like secret ones stay.
    #[test]
    fn common_secret_shapes_in_command_lines_are_redacted() {
        check(&[
            // Database clients
            ("mysql -pS3cret db", "mysql -p[redacted] db"),
            ("mysqldump -u root -pS3cret -h db.local shop", "mysqldump -u root -p[redacted] -h db.local shop"),
            ("mysql --password=S3cret", "mysql --password=[redacted]"),
            ("PGPASSWORD=S3cret psql -h db -U app", "PGPASSWORD=[redacted] psql -h db -U app"),
            ("redis-cli -a S3cret ping", "redis-cli -a [redacted] ping"),
            (
                "redis-cli -h cache -p 6380 -a S3cret --no-auth-warning",
                "redis-cli -h cache -p 6380 -a [redacted] --no-auth-warning",
            ),
            ("redis-cli --pass S3cret", "redis-cli --pass [redacted]"),
            // Logins
            ("docker login -p S3cret", "docker login -p [redacted]"),
            ("docker login -u me -p S3cret ghcr.io", "docker login -u me -p [redacted] ghcr.io"),
            ("docker login --password S3cret", "docker login --password [redacted]"),
            ("sshpass -p S3cret ssh host", "sshpass -p [redacted] ssh host"),
            ("sshpass -p S3cret ssh -p 2222 host", "sshpass -p [redacted] ssh -p 2222 host"),
            // Cloud credentials
            ("aws configure set aws_secret_access_key S3cret", "aws configure set aws_secret_access_key [redacted]"),
            (
                "aws configure set aws_session_token S3cret --profile dev",
                "aws configure set aws_session_token [redacted] --profile dev",
            ),
            ("AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE aws s3 ls", "AWS_ACCESS_KEY_ID=[redacted] aws s3 ls"),
            ("echo AKIAIOSFODNN7EXAMPLE > key.txt", "echo [redacted] > key.txt"),
            ("echo ASIAIOSFODNN7EXAMPLE", "echo [redacted]"),
            (
                "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY terraform apply",
                "AWS_SECRET_ACCESS_KEY=[redacted] terraform apply",
            ),
            // HTTP
            ("curl -H 'Cookie: session=S3cret' https://x", "curl -H 'Cookie: [redacted]' https://x"),
            ("curl -H \"Cookie: a=1; session=S3cret\" https://x", "curl -H \"Cookie: [redacted]\" https://x"),
            ("curl -H Cookie:session=S3cret https://x", "curl -H Cookie:[redacted] https://x"),
            (
                "curl -H 'Authorization: Bearer S3cret' https://x",
                "curl -H 'Authorization: Bearer [redacted]' https://x",
            ),
            ("curl -u user:S3cret https://x", "curl -u user:[redacted] https://x"),
            ("curl --user 'user:S3cret' https://x", "curl --user 'user:[redacted]' https://x"),
            ("git clone https://user:S3cret@host/repo", "git clone https://user:[redacted]@host/repo"),
            // Flags that name a secret
            ("gh auth login --token S3cret", "gh auth login --token [redacted]"),
            ("deploy --api-key S3cret --env prod", "deploy --api-key [redacted] --env prod"),
            ("app --password S3cret", "app --password [redacted]"),
            ("app --secret S3cret run", "app --secret [redacted] run"),
            // Provider tokens, anywhere
            ("gh api -H 'x: ghp_0123456789abcdefghijABCDEFGHIJ' /user", "gh api -H 'x: [redacted]' /user"),
            (
                "echo github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz | gh auth login --with-token",
                "echo [redacted] | gh auth login --with-token",
            ),
            ("llm -k sk-proj-abcdefghijklmnop0123 'hi'", "llm -k [redacted] 'hi'"),
            ("slack-post xoxb-1234567890-abcdefghij #general", "slack-post [redacted] #general"),
            // Flags that only look like secret ones
            ("mysql -h host -u root", "mysql -h host -u root"),
            ("mysql -h host -u root -p shop", "mysql -h host -u root -p shop"),
            ("mysql -h host -P 3306 -u root", "mysql -h host -P 3306 -u root"),
            ("ls -p", "ls -p"),
            ("ls -p src && mkdir -p build", "ls -p src && mkdir -p build"),
            ("grep -a pattern file.bin", "grep -a pattern file.bin"),
            // A client's flag reaches no further than its own command.
            ("mysql -h db; ls -pX", "mysql -h db; ls -pX"),
            ("redis-cli ping | grep -a x", "redis-cli ping | grep -a x"),
            ("docker login registry && tar -p x.tar", "docker login registry && tar -p x.tar"),
            ("sshpass -f pw ssh host || cp -p a b", "sshpass -f pw ssh host || cp -p a b"),
            ("ssh -p 2222 host", "ssh -p 2222 host"),
            ("docker run -p 8080:80 nginx", "docker run -p 8080:80 nginx"),
            ("docker login --password-stdin < pw.txt", "docker login --password-stdin < pw.txt"),
            ("git log --author ann -u", "git log --author ann -u"),
        ]);
    }
}

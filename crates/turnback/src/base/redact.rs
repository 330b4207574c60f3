//! Redaction of secrets in text turnback records but did not write itself (shell commands
//! an agent ran): values that look like passwords, tokens or keys become `[redacted]`.
//!
//! Invariants: only the secret value is replaced, never the command's shape; the result
//! never contains a matched value; redacting twice changes nothing more.

use std::sync::OnceLock;

use regex::Regex;

const MARK: &str = "[redacted]";

fn rules() -> &'static [(Regex, &'static str)] {
    static RULES: OnceLock<Vec<(Regex, &'static str)>> = OnceLock::new();
    RULES.get_or_init(|| {
        // `auth` but not `author`; words joined by `_` or `-` (DB_PASSWORD, --client-secret).
        let word = r"(?:api[_-]?key|secret|token|passw(?:or)?d|pwd|auth(?:[^o]|$)|credentials?)";
        let named = format!(r"[A-Za-z0-9_-]*{word}[A-Za-z0-9_-]*");
        [
            // "name": "value" (the JSON arguments of an MCP tool call)
            (format!(r#"(?i)("{named}"\s*:\s*)"(?:[^"\\]|\\.)*""#), "${1}\"[redacted]\""),
            // NAME=value (environment assignments, config flags)
            (format!(r#"(?i)\b({named})=(?:'[^']*'|"[^"]*"|\S+)"#), "${1}=[redacted]"),
            // --password value, --token=value (-p value is left alone: too common a flag)
            (format!(r#"(?i)(--{named})(=|\s+)(?:'[^']*'|"[^"]*"|\S+)"#), "${1}${2}[redacted]"),
            // Authorization: Bearer/Basic/Token …, X-Api-Key: … (headers)
            (r"(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9._~+/=:-]+".to_string(), "${1}${2}[redacted]"),
            (r"(?i)\b([A-Za-z0-9-]*(?:api-?key|token|secret)\s*:\s*)[^\s'\x22]+".to_string(), "${1}[redacted]"),
            // curl -u user:password
            (r"(\s-u\s+[^\s:]+:)\S+".to_string(), "${1}[redacted]"),
            (r"(://[^/\s:@]+:)[^/\s@]+@".to_string(), "${1}[redacted]@"),
            (r"\bAKIA[0-9A-Z]{16}\b".to_string(), MARK),
            (r"\bgh[pousr]_[A-Za-z0-9]{20,}".to_string(), MARK),
            (r"\bsk-[A-Za-z0-9_-]{16,}".to_string(), MARK),
            (r"\bxox[abposr]-[A-Za-z0-9-]{10,}".to_string(), MARK),
            (r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$)".to_string(), MARK),
        ]
        .into_iter()
        .map(|(pattern, with)| (Regex::new(&pattern).expect("valid redaction pattern"), with))
        .collect()
    })
}

/// `text` with every secret-looking value replaced by `[redacted]`.
pub fn redact(text: &str) -> String {
    let mut out = text.to_string();
    for (pattern, with) in rules() {
        out = pattern.replace_all(&out, *with).into_owned();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn secret_values_go_and_the_command_stays() {
        let cases = [
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
        ];
        for (input, expected) in cases {
            assert_eq!(redact(input), expected, "{input}");
            assert_eq!(redact(&redact(input)), expected, "idempotent: {input}");
        }
        assert!(!redact("export DB_PASSWORD=\"p a s s\"").contains("p a s s"));
    }
}

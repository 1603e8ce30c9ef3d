//! `include = ["/etc/tcpmuxd/conf.d/*.toml"]`: drop-in files that add
//! `[service.NAME]` tables, xinetd.d style. A pattern may have `*` and `?` in
//! its file name; its matches are read in name order, and a pattern that
//! matches nothing adds nothing (an empty or a missing conf.d is fine). A
//! path without a wildcard must exist. Relative paths are relative to the main file.

use std::path::{Path, PathBuf};

use toml::Spanned;

use super::error::{ConfigError, Source};

/// Each matching file's path and text, in order.
pub(crate) fn read(
    src: Source<'_>,
    include: Option<&Spanned<Vec<String>>>,
) -> Result<Vec<(String, String)>, ConfigError> {
    let Some(patterns) = include else {
        return Ok(Vec::new());
    };
    let base = Path::new(src.origin).parent().unwrap_or(Path::new(""));
    let mut files = Vec::new();
    for pattern in patterns.get_ref() {
        let path = base.join(pattern);
        let error =
            |message: String| src.at(patterns.span(), format!("include {pattern:?}: {message}"));
        for file in expand(&path).map_err(error)? {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| src.at(patterns.span(), format!("include {}: {e}", file.display())))?;
            files.push((file.display().to_string(), text));
        }
    }
    Ok(files)
}

fn expand(path: &Path) -> Result<Vec<PathBuf>, String> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    if !name.contains(['*', '?']) {
        return Ok(vec![path.to_owned()]);
    }
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if dir.to_str().is_some_and(|d| d.contains(['*', '?'])) {
        return Err("wildcards go in the file name only".into());
    }
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        // As nginx and systemd drop-ins do: no directory, no drop-ins (the
        // shipped file includes conf.d/*.toml whether or not it exists).
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            tracing::debug!(directory = %dir.display(), "include: no such directory; nothing to include");
            return Ok(Vec::new());
        }
        Err(e) => return Err(format!("cannot read {}: {e}", dir.display())),
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|entry| {
            entry
                .file_type()
                .is_ok_and(|t| t.is_file() || t.is_symlink())
        })
        .filter(|entry| {
            let file = entry.file_name();
            let file = file.to_string_lossy();
            // Editors' backups and hidden files stay out unless asked for.
            (!file.starts_with('.') || name.starts_with('.')) && matches(name, &file)
        })
        .map(|entry| entry.path())
        .collect();
    found.sort();
    Ok(found)
}

/// Shell-style matching of `*` (any run) and `?` (one character).
fn matches(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn wildcards() {
        assert!(matches("*.toml", "web.toml"));
        assert!(!matches("*.toml", "web.toml~"));
        assert!(matches("??-*.toml", "10-db.toml"));
        assert!(!matches("??-*.toml", "1-db.toml"));
        assert!(matches("*", "anything"));
        assert!(matches("a*b*c", "aXbYc"));
        assert!(!matches("a*b*c", "aXbY"));
    }
}

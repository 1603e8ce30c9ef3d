//! docs/configuration.md as a man page (tcpmuxd.toml(5)): the subset of
//! Markdown the document uses (headings, paragraphs, lists, tables, code
//! blocks, inline code, bold, links) turned into roff, so the page and the
//! document never disagree.

/// The man page for `markdown`, titled `title` in `section`.
pub fn to_man(markdown: &str, title: &str, section: &str) -> String {
    let mut out = format!(
        ".TH {title} {section} \"\" \"tcpmux\" \"File formats\"\n\
         .SH NAME\ntcpmuxd.toml \\- configuration file of tcpmuxd(8)\n"
    );
    let lines: Vec<&str> = markdown.lines().collect();
    let mut i = 0;
    let mut in_paragraph = false;
    while i < lines.len() {
        let line = lines[i];
        if line.starts_with("```") {
            out.push_str(".PP\n.RS 4\n.nf\n");
            i += 1;
            while i < lines.len() && !lines[i].starts_with("```") {
                // Verbatim, but roff's own escape character still counts:
                // `\x00` in a regex would be read as a troff request.
                out.push_str(&escape_line(&roff(lines[i])));
                out.push('\n');
                i += 1;
            }
            out.push_str(".fi\n.RE\n");
            in_paragraph = false;
        } else if let Some(heading) = line.strip_prefix("### ") {
            out.push_str(&format!(".SS \"{}\"\n", inline(heading).replace('"', "")));
            in_paragraph = false;
        } else if let Some(heading) = line.strip_prefix("## ") {
            out.push_str(&format!(
                ".SH \"{}\"\n",
                inline(heading).to_uppercase().replace('"', "")
            ));
            in_paragraph = false;
        } else if line.starts_with("# ") {
            // The title: the NAME section says it.
        } else if line.starts_with('|') {
            let start = i;
            while i < lines.len() && lines[i].starts_with('|') {
                i += 1;
            }
            out.push_str(&table(&lines[start..i]));
            in_paragraph = false;
            continue;
        } else if let Some(item) = line.trim_start().strip_prefix("- ") {
            out.push_str(".IP \\(bu 2\n");
            out.push_str(&escape_line(&inline(item)));
            out.push('\n');
            in_paragraph = true;
        } else if line.trim().is_empty() {
            in_paragraph = false;
        } else {
            if !in_paragraph {
                out.push_str(".PP\n");
                in_paragraph = true;
            }
            out.push_str(&escape_line(&inline(line.trim())));
            out.push('\n');
        }
        i += 1;
    }
    out
}

/// A Markdown table as tagged paragraphs: the first cell the tag, the other
/// cells (named by their header) the body.
fn table(rows: &[&str]) -> String {
    let cells = |row: &str| -> Vec<String> {
        row.trim()
            .trim_matches('|')
            .split(" | ")
            .map(|c| c.trim().trim_matches('|').trim().to_owned())
            .collect()
    };
    let Some((header, body)) = rows.split_first() else {
        return String::new();
    };
    let header = cells(header);
    let mut out = String::new();
    for row in body
        .iter()
        .filter(|r| !r.starts_with("|--") && !r.starts_with("|---"))
    {
        let row = cells(row);
        let Some((tag, rest)) = row.split_first() else {
            continue;
        };
        out.push_str(".TP\n");
        out.push_str(&escape_line(&inline(tag)));
        out.push('\n');
        let last = rest.len().saturating_sub(1);
        let mut body = Vec::new();
        for (n, cell) in rest.iter().enumerate() {
            let name = header.get(n + 1).map(String::as_str).unwrap_or("");
            body.push(if n == last || name.is_empty() {
                inline(cell)
            } else {
                format!("{}: {}.", name, inline(cell))
            });
        }
        out.push_str(&escape_line(&body.join(" ")));
        out.push('\n');
    }
    out
}

/// Inline Markdown to roff fonts: `code` and **bold** in bold, links as their text.
fn inline(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if let Some(after) = rest.strip_prefix('`') {
            if let Some(end) = after.find('`') {
                out.push_str(&format!("\\fB{}\\fR", roff(&after[..end])));
                rest = &after[end + 1..];
                continue;
            }
        }
        if let Some(after) = rest.strip_prefix("**") {
            if let Some(end) = after.find("**") {
                out.push_str(&format!("\\fB{}\\fR", roff(&after[..end])));
                rest = &after[end + 2..];
                continue;
            }
        }
        if let Some(after) = rest.strip_prefix('[') {
            if let Some((label, tail)) = after.split_once("](") {
                if let Some(end) = tail.find(')') {
                    out.push_str(&roff(label));
                    rest = &tail[end + 1..];
                    continue;
                }
            }
        }
        out.push_str(&roff(&c.to_string()));
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// Text made safe for roff (a backslash, and the hyphen as a minus sign).
fn roff(text: &str) -> String {
    text.replace('\\', "\\e").replace('-', "\\-")
}

/// A line that roff would read as a request (a leading `.` or `'`) made plain.
fn escape_line(line: &str) -> String {
    if line.starts_with('.') || line.starts_with('\'') {
        format!("\\&{line}")
    } else {
        line.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_subset_converts() {
        let page = to_man(
            "# T\n\n## Keys\n\nSome `key` and **bold** [link](x.md).\n\n| key | type | meaning |\n|---|---|---|\n| `a` | int | what a is |\n\n```toml\n.x = 1\n```\n- item\n",
            "X",
            "5",
        );
        assert!(page.contains(".SH \"KEYS\""), "{page}");
        assert!(
            page.contains("Some \\fBkey\\fR and \\fBbold\\fR link."),
            "{page}"
        );
        assert!(
            page.contains(".TP\n\\fBa\\fR\ntype: int. what a is\n"),
            "{page}"
        );
        assert!(page.contains(".nf\n\\&.x = 1\n.fi"), "{page}");
        assert!(page.contains(".IP \\(bu 2\nitem"), "{page}");
    }

    #[test]
    fn a_backslash_in_a_code_block_is_printed_not_read() {
        let page = to_man("```toml\nregex = '^\\x00-a'\n```\n", "X", "5");
        assert!(page.contains("regex = '^\\ex00\\-a'"), "{page}");
    }
}

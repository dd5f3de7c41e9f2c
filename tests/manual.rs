//! The manual (docs/, an mdBook) and README.md, checked offline, without mdbook itself:
//! - every relative link and image in README.md and docs/src/**/*.md resolves to a file of the
//!   repository, and a link in the book stays inside docs/src (only those files are in the
//!   built book);
//! - every `#anchor`, on the same page or another, names a heading of the target page, by
//!   mdBook's rule for heading ids (the heading's text, lower case, whitespace to `-`, every
//!   character but letters, digits, `-` and `_` dropped; a repeated id gets `-1`, `-2`, ...);
//! - every chapter under docs/src is listed in SUMMARY.md, and every SUMMARY entry exists;
//! - every `{{#include ...}}` target exists (and the included text is part of its page, so
//!   its headings and links count there);
//! - external http(s) links are well formed (they are not fetched: no network);
//! - README.md is at most 250 lines, and its minimal production configuration is valid.
//!
//! `tests/run.sh` also builds the book with `mdbook build docs` (into target/book).

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The longest README.md allowed: what rankpulse is, a picture, the two commands, a minimal
/// configuration and links into the manual. Everything else is in the manual.
const README_MAX_LINES: usize = 250;

/// Every problem found in the repository at `root`, one line each (empty when all is well).
fn check(root: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let book = root.join("docs/src");
    let mut pages = vec![root.join("README.md")];
    // SUMMARY.md's links are chapters: check_summary's.
    pages.extend(markdown_files(&book).into_iter().filter(|p| !p.ends_with("SUMMARY.md")));
    for page in &pages {
        let (text, include_problems) = load_page(root, page);
        problems.extend(include_problems);
        check_links(root, page, &text, &mut problems);
    }
    check_summary(root, &book, &mut problems);
    match std::fs::read_to_string(root.join("README.md")) {
        Ok(readme) if readme.lines().count() > README_MAX_LINES => {
            problems.push(format!("README.md: {} lines, more than {README_MAX_LINES}", readme.lines().count()))
        }
        Ok(_) => {}
        Err(e) => problems.push(format!("README.md: {e}")),
    }
    problems
}

/// The repository-relative name of `path`, for messages.
fn shown(root: &Path, path: &Path) -> String {
    path.strip_prefix(root).unwrap_or(path).display().to_string()
}

/// Every `.md` file under `dir`, sorted.
fn markdown_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return files };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(markdown_files(&path));
        } else if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// A page's text with its `{{#include FILE}}` and `{{#include FILE:FROM:TO}}` directives
/// replaced by the lines they include, as mdBook's preprocessor does; a missing target or a
/// form this check does not know is a problem (returned beside the text).
fn load_page(root: &Path, page: &Path) -> (String, Vec<String>) {
    let text = match std::fs::read_to_string(page) {
        Ok(text) => text,
        Err(e) => return (String::new(), vec![format!("{}: {e}", shown(root, page))]),
    };
    let mut out = String::new();
    let mut problems = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("{{#include ") {
        out.push_str(&rest[..at]);
        let Some(end) = rest[at..].find("}}") else {
            problems.push(format!("{}: an unterminated {{{{#include", shown(root, page)));
            break;
        };
        let spec = rest[at + "{{#include ".len()..at + end].trim();
        rest = &rest[at + end + 2..];
        let (file, range) = spec.split_once(':').map_or((spec, None), |(f, r)| (f, Some(r)));
        let target = normalized(&page.parent().unwrap().join(file));
        let Ok(included) = std::fs::read_to_string(&target) else {
            problems.push(format!("{}: {{{{#include {spec}}}}}: no file {}", shown(root, page), shown(root, &target)));
            continue;
        };
        let lines: Vec<&str> = included.lines().collect();
        let line = |s: &str, default: usize| if s.is_empty() { Some(default) } else { s.parse::<usize>().ok() };
        let (from, to) = match range.map(|r| r.split_once(':').unwrap_or((r, r))) {
            None => (Some(1), Some(lines.len())),
            Some((a, b)) => (line(a, 1), line(b, lines.len())),
        };
        match (from, to) {
            (Some(from), Some(to)) if from >= 1 && from <= to.max(1) => {
                for l in lines.iter().take(to).skip(from - 1) {
                    out.push_str(l);
                    out.push('\n');
                }
            }
            _ => problems.push(format!("{}: {{{{#include {spec}}}}}: only line ranges are checked", shown(root, page))),
        }
    }
    out.push_str(rest);
    (out, problems)
}

/// `text` with fenced code blocks blanked (their lines left empty, so line numbers hold).
fn without_fences(text: &str) -> String {
    let mut out = String::new();
    let mut fence: Option<(char, usize)> = None;
    for line in text.lines() {
        let t = line.trim_start();
        let run = |c: char| t.chars().take_while(|&x| x == c).count();
        let blank = match fence {
            Some((c, n)) => {
                if run(c) >= n && t.trim_end().chars().all(|x| x == c) {
                    fence = None;
                }
                true
            }
            None => {
                for c in ['`', '~'] {
                    if run(c) >= 3 {
                        fence = Some((c, run(c)));
                    }
                }
                fence.is_some()
            }
        };
        if !blank {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// `text` with inline code spans (which may span lines) replaced by spaces, newlines kept.
fn without_code_spans(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = chars.clone();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '\\' {
            i += 2;
            continue;
        }
        if chars[i] != '`' {
            i += 1;
            continue;
        }
        let n = chars[i..].iter().take_while(|&&c| c == '`').count();
        // The closing run: exactly n backticks.
        let mut j = i + n;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let m = chars[j..].iter().take_while(|&&c| c == '`').count();
                if m == n {
                    close = Some(j + m);
                    break;
                }
                j += m;
            } else {
                j += 1;
            }
        }
        match close {
            Some(end) => {
                for c in &mut out[i..end] {
                    if *c != '\n' {
                        *c = ' ';
                    }
                }
                i = end;
            }
            None => i += n,
        }
    }
    out.into_iter().collect()
}

/// mdBook's id of a heading whose rendered text is `text` (mdbook-html's `id_from_content`).
fn heading_id(text: &str) -> String {
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c)
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// The text a heading's markdown renders to: code spans and emphasis markers gone, links
/// replaced by their text, HTML tags and backslash escapes removed.
fn heading_text(markdown: &str) -> String {
    let mut s = markdown.replace(['`', '*'], "");
    // [text](target) -> text
    while let (Some(open), Some(mid)) = (s.find('['), s.find("](")) {
        let Some(close) = s[mid..].find(')').map(|c| mid + c) else { break };
        if open > mid {
            break;
        }
        s = format!("{}{}{}", &s[..open], &s[open + 1..mid], &s[close + 1..]);
    }
    let mut out = String::new();
    let mut in_tag = false;
    let mut escaped = false;
    for c in s.chars() {
        match c {
            '\\' if !escaped => escaped = true,
            '<' if !escaped => in_tag = true,
            '>' if in_tag => in_tag = false,
            _ if in_tag => {}
            _ => {
                out.push(c);
                escaped = false;
            }
        }
    }
    out
}

/// The ids of every heading of a page's text (includes expanded), in order, made unique as
/// mdBook makes them: the second `## Notes` is `notes-1`.
fn heading_ids(text: &str) -> HashSet<String> {
    let mut used = HashSet::new();
    let text = without_fences(text);
    let lines: Vec<&str> = text.lines().collect();
    for (n, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        let level = t.chars().take_while(|&c| c == '#').count();
        let content = if (1..=6).contains(&level)
            && line.len() - t.len() <= 3
            && (t.len() == level || t[level..].starts_with([' ', '\t']))
        {
            // Without a closing sequence of #s.
            let c = t[level..].trim();
            let c = c.trim_end_matches('#');
            if c.ends_with(' ') || c.is_empty() {
                c.trim_end().to_string()
            } else {
                t[level..].trim().to_string()
            }
        } else if n > 0
            && !t.is_empty()
            && (t.trim_end().chars().all(|c| c == '=') || t.trim_end().chars().all(|c| c == '-'))
            && !lines[n - 1].trim().is_empty()
            && !lines[n - 1].trim_start().starts_with(['#', '|', '-', '*', '>'])
        {
            // A setext heading: the line above, underlined.
            used.remove(&heading_id(&heading_text(lines[n - 1].trim())));
            lines[n - 1].trim().to_string()
        } else {
            continue;
        };
        let id = match content.rsplit_once("{#") {
            Some((_, attrs)) if content.ends_with('}') => {
                attrs.trim_end_matches('}').split_whitespace().next().unwrap_or("").to_string()
            }
            _ => heading_id(&heading_text(&content)),
        };
        // mdBook's unique_id: the id, or the first of id-1, id-2, ... not yet used.
        if !used.insert(id.clone()) {
            let mut k = 1;
            while !used.insert(format!("{id}-{k}")) {
                k += 1;
            }
        }
    }
    used
}

/// Whether `url` is a well-formed http(s) URL: a scheme, a host, no whitespace or characters
/// a URL cannot hold unescaped.
fn well_formed_url(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://")) else { return false };
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_name =
        host.rsplit_once(':').map_or(host, |(h, port)| if port.chars().all(|c| c.is_ascii_digit()) { h } else { host });
    !host_name.is_empty()
        && host_name.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
        && !host_name.starts_with(['.', '-'])
        && url.chars().all(|c| c.is_ascii_graphic() && !matches!(c, '<' | '>' | '"' | '`' | '{' | '}' | '|' | '\\'))
}

/// Every link target of a page: inline links and images `[text](target)`, reference
/// definitions `[label]: target` and autolinks `<https://...>`, with their line numbers;
/// code (fenced and inline) is not looked at.
fn links(text: &str) -> Vec<(usize, String)> {
    let text = without_code_spans(&without_fences(text));
    let line_of = |at: usize| text[..at].matches('\n').count() + 1;
    let mut found = Vec::new();
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(at) = text[from..].find("](").map(|a| a + from) {
        from = at + 2;
        if at > 0 && bytes[at - 1] == b'\\' {
            continue;
        }
        // The target runs to the matching parenthesis.
        let mut depth = 1;
        let mut end = None;
        for (i, c) in text[at + 2..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(at + 2 + i);
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(end) = end else {
            found.push((line_of(at), String::from("(unterminated link target)")));
            continue;
        };
        let inner = text[at + 2..end].trim();
        let target = if let Some(angled) = inner.strip_prefix('<') {
            angled.split_once('>').map_or(angled, |(t, _)| t).to_string()
        } else {
            inner.split_whitespace().next().unwrap_or("").to_string()
        };
        found.push((line_of(at), target));
    }
    for (n, line) in text.lines().enumerate() {
        let t = line.trim_start();
        if let Some((label, target)) = t.strip_prefix('[').and_then(|r| r.split_once("]:")) {
            if !label.is_empty() && !label.contains(']') {
                found.push((n + 1, target.split_whitespace().next().unwrap_or("").to_string()));
            }
        }
        let mut rest = line;
        while let Some(at) = rest.find("<http") {
            let Some(end) = rest[at..].find('>') else { break };
            found.push((n + 1, rest[at + 1..at + end].to_string()));
            rest = &rest[at + end..];
        }
    }
    found
}

/// `path` with `.` and `..` resolved lexically (the file need not exist).
fn normalized(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn check_links(root: &Path, page: &Path, text: &str, problems: &mut Vec<String>) {
    let book = normalized(&root.join("docs/src"));
    let in_book = normalized(page).starts_with(&book);
    for (line, target) in links(text) {
        let at = format!("{}:{line}", shown(root, page));
        if target.is_empty() {
            problems.push(format!("{at}: a link without a target"));
            continue;
        }
        if target.starts_with("http://") || target.starts_with("https://") {
            if !well_formed_url(&target) {
                problems.push(format!("{at}: {target:?} is not a well-formed URL"));
            }
            continue;
        }
        if target.starts_with("mailto:") {
            continue;
        }
        if target.contains("://") || target.starts_with('/') {
            problems.push(format!("{at}: {target:?}: neither http(s) nor a relative path"));
            continue;
        }
        let (file, anchor) = target.split_once('#').map_or((target.as_str(), None), |(f, a)| (f, Some(a)));
        let file = file.split('?').next().unwrap_or(file);
        let resolved =
            if file.is_empty() { page.to_path_buf() } else { normalized(&page.parent().unwrap().join(file)) };
        if !resolved.exists() {
            problems.push(format!("{at}: {target:?}: no file {}", shown(root, &resolved)));
            continue;
        }
        if in_book && !resolved.starts_with(&book) {
            problems.push(format!(
                "{at}: {target:?} leaves docs/src, so the built book cannot link to it: name the file as code instead"
            ));
            continue;
        }
        let Some(anchor) = anchor else { continue };
        if resolved.extension().is_none_or(|e| e != "md") {
            problems.push(format!("{at}: {target:?}: an anchor into a file that is not markdown"));
            continue;
        }
        // (An include the target page lacks is reported when that page is checked.)
        let ids = heading_ids(&load_page(root, &resolved).0);
        if !ids.contains(anchor) {
            problems.push(format!("{at}: {target:?}: no heading with the id {anchor:?} in {}", shown(root, &resolved)));
        }
    }
}

fn check_summary(root: &Path, book: &Path, problems: &mut Vec<String>) {
    let summary_path = book.join("SUMMARY.md");
    let Ok(summary) = std::fs::read_to_string(&summary_path) else {
        problems.push(format!("{}: missing", shown(root, &summary_path)));
        return;
    };
    let mut listed = HashSet::new();
    for (line, target) in links(&summary) {
        if target.is_empty() {
            continue; // a draft chapter
        }
        let path = normalized(&book.join(target.split('#').next().unwrap_or("")));
        if !path.is_file() {
            problems.push(format!("{}:{line}: the chapter {target} does not exist", shown(root, &summary_path)));
        }
        listed.insert(path);
    }
    for chapter in markdown_files(book) {
        if chapter != summary_path && !listed.contains(&normalized(&chapter)) {
            problems.push(format!("{}: a chapter not listed in SUMMARY.md", shown(root, &chapter)));
        }
    }
}

#[test]
fn the_manual_and_the_readme_link_only_to_what_exists() {
    let problems = check(Path::new(ROOT));
    assert!(problems.is_empty(), "{} problems:\n{}", problems.len(), problems.join("\n"));
}

/// The introduction's chapter list links every chapter of SUMMARY.md, so a reader who starts
/// there sees everything the manual has.
#[test]
fn the_introduction_lists_every_chapter() {
    let book = Path::new(ROOT).join("docs/src");
    let read = |name: &str| std::fs::read_to_string(book.join(name)).unwrap();
    let target = |link: &str| link.split('#').next().unwrap_or("").to_string();
    let introduced: HashSet<String> = links(&read("introduction.md")).into_iter().map(|(_, t)| target(&t)).collect();
    let missing: Vec<String> = links(&read("SUMMARY.md"))
        .into_iter()
        .map(|(_, t)| target(&t))
        .filter(|t| !t.is_empty() && t != "introduction.md" && !introduced.contains(t))
        .collect();
    assert!(missing.is_empty(), "chapters the introduction does not list: {missing:?}");
}

/// "The contract" was the project's own name for its specification, which users never see:
/// the manual, the README and the shipped configuration say what they mean instead.
#[test]
fn the_manual_does_not_speak_of_a_contract_users_never_see() {
    let root = Path::new(ROOT);
    let mut pages = markdown_files(&root.join("docs/src"));
    pages.push(root.join("README.md"));
    pages.push(root.join("config/rankpulse.toml"));
    let mut found = Vec::new();
    for page in pages {
        for (n, line) in std::fs::read_to_string(&page).unwrap().lines().enumerate() {
            if line.to_lowercase().contains("contract") {
                found.push(format!("{}:{}: {line}", shown(root, &page), n + 1));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// prometheus.md says what `rankpulse_window_mean`'s `metric` label holds: the metric keys of
/// the metrics chapter's first column (`ndcg@10` for `ndcg@k`), each example one of them.
#[test]
fn the_window_mean_metric_label_is_stated_as_metric_keys() {
    let book = Path::new(ROOT).join("docs/src");
    let prometheus = std::fs::read_to_string(book.join("prometheus.md")).unwrap();
    let row = prometheus.lines().find(|l| l.starts_with("| `rankpulse_window_mean`")).expect("the row");
    let stated = row.split_once("`metric` is").expect("the row says what `metric` is").1;
    assert!(stated.contains("(metrics.md)"), "{row}");
    let metrics = std::fs::read_to_string(book.join("metrics.md")).unwrap();
    let keys: Vec<String> = metrics
        .lines()
        .skip_while(|l| !l.starts_with("| rankpulse key"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .flat_map(|l| {
            l.split('|').nth(1).unwrap_or("").split('`').skip(1).step_by(2).map(String::from).collect::<Vec<_>>()
        })
        .collect();
    assert!(keys.contains(&"mrr".to_string()) && keys.contains(&"ndcg@k".to_string()), "{keys:?}");
    let is_key = |value: &str| {
        keys.iter().any(|k| {
            k == value
                || k.strip_suffix("@k").is_some_and(|base| {
                    value.strip_prefix(base).and_then(|r| r.strip_prefix('@')).is_some_and(|n| n.parse::<u32>().is_ok())
                })
                || (k.starts_with("iprec@") && value.starts_with("iprec@0.") && value.len() == "iprec@0.3".len())
        })
    };
    let examples: Vec<&str> = stated.split('`').skip(1).step_by(2).collect();
    assert!(examples.len() >= 3, "{row}");
    for example in examples {
        assert!(is_key(example), "`{example}` in the rankpulse_window_mean row is no metric key of metrics.md: {row}");
    }
}

#[test]
fn the_readme_minimal_configuration_is_valid() {
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap();
    let section = readme.split_once("## A minimal production configuration").expect("the README has one").1;
    let block = section.split_once("```toml\n").unwrap().1.split_once("```").unwrap().0;
    let cfg = rankpulse::config::Config::from_toml_with_env(block, "README.md", Vec::new())
        .unwrap_or_else(|e| panic!("the README's minimal configuration is refused: {e}\n{block}"));
    assert_ne!(cfg.kafka.brokers, "localhost:9092", "it names brokers");
}

/// A small repository with one of each kind of mistake: every one must be reported, and the
/// same repository with them fixed must pass.
#[test]
fn the_check_reports_what_is_broken() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let write = |path: &str, text: &str| {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(
        "README.md",
        "# x\n\n[ok](docs/src/a.md#notes-1) [gone](docs/src/missing.md) [bad anchor](docs/src/a.md#nowhere)\n\
         ![picture](docs/missing.png) <https://example.com/ok> [url](https:///no-host)\n\
         `[in code](nowhere.md)`\n```\n[in a fence](nowhere.md)\n```\n",
    );
    write("docs/src/SUMMARY.md", "# Summary\n\n- [A](a.md)\n- [Gone](gone.md)\n- [Draft]()\n");
    write(
        "docs/src/a.md",
        "# A: `the` page!\n\n## Notes\n\n## Notes\n\n[self](#a-the-page) [dup](#notes-1) [same page](#notes-2)\n\
         [out of the book](../../README.md) [included](#from-b)\n\n{{#include ../b.md}}\n{{#include ../none.md}}\n",
    );
    write("docs/src/unlisted.md", "# U\n");
    write("docs/b.md", "## From b\n");
    write("docs/src/empty.md", "");
    let problems = check(root);
    let expect = [
        "README.md:3: \"docs/src/missing.md\": no file docs/src/missing.md",
        "README.md:3: \"docs/src/a.md#nowhere\": no heading with the id \"nowhere\" in docs/src/a.md",
        "README.md:4: \"docs/missing.png\": no file docs/missing.png",
        "README.md:4: \"https:///no-host\" is not a well-formed URL",
        "docs/src/a.md: {{#include ../none.md}}: no file docs/none.md",
        "docs/src/a.md:7: \"#notes-2\": no heading with the id \"notes-2\" in docs/src/a.md",
        "docs/src/a.md:8: \"../../README.md\" leaves docs/src, so the built book cannot link to it: name the file as code instead",
        "docs/src/SUMMARY.md:4: the chapter gone.md does not exist",
        "docs/src/empty.md: a chapter not listed in SUMMARY.md",
        "docs/src/unlisted.md: a chapter not listed in SUMMARY.md",
    ];
    for e in expect {
        assert!(problems.iter().any(|p| p == e), "not reported: {e}\nreported:\n{}", problems.join("\n"));
    }
    assert_eq!(problems.len(), expect.len(), "{}", problems.join("\n"));

    // Everything fixed, and a README of 251 lines.
    write("README.md", &format!("# x\n\n[ok](docs/src/a.md#notes-1)\n{}", "line\n".repeat(248)));
    write("docs/src/SUMMARY.md", "# Summary\n\n- [A](a.md)\n  - [U](unlisted.md)\n- [E](./empty.md)\n");
    write(
        "docs/src/a.md",
        "# A: `the` page!\n\n## Notes\n\n## Notes\n\n[self](#a-the-page) [dup](#notes-1)\n[included](#from-b)\n\n{{#include ../b.md}}\n",
    );
    assert_eq!(check(root), vec!["README.md: 251 lines, more than 250".to_string()]);
    write("README.md", "# x\n\n[ok](docs/src/a.md#notes-1)\n");
    assert_eq!(check(root), Vec::<String>::new());
}

#[test]
fn heading_ids_follow_mdbook() {
    assert_eq!(heading_id(&heading_text("Offline evaluation: `rankpulse eval`")), "offline-evaluation-rankpulse-eval");
    assert_eq!(
        heading_id(&heading_text("Quick start with Grafana (docker compose)")),
        "quick-start-with-grafana-docker-compose"
    );
    assert_eq!(heading_id(&heading_text("A/B statistics")), "ab-statistics");
    assert_eq!(
        heading_id(&heading_text("Issue 32: events of the user's own shape")),
        "issue-32-events-of-the-users-own-shape"
    );
    assert_eq!(heading_id(&heading_text("`state.dir` is gone")), "statedir-is-gone");
    assert_eq!(heading_id(&heading_text("Über [linked](x.md) *text*")), "über-linked-text");
    let ids = heading_ids("# T\n\n## Notes\n```\n# not a heading\n```\n## Notes\nSetext\n---\n## Custom {#here}\n");
    let expected: HashSet<String> = ["t", "notes", "notes-1", "setext", "here"].map(String::from).into();
    assert_eq!(ids, expected);
}

//! Text on the page: escaping, numbers for people, and figures that carry their exact value.

use std::fmt::Write;

/// Text for HTML content and attribute values: names come from events, so anything.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A path segment: every byte but the unreserved ones percent-encoded (RFC 3986).
///
/// Also how a name (an experiment, variant, ranker or metric key) is written in a figure's
/// data path (see [`figure`]): names come from events, so anything, and a name holding the
/// paths' own syntax (`|`, `&`, `=`, `{row}`) would be read as more of the path. Encoded, a
/// name holds only letters, digits, `-._~` and `%XX`, none of which the syntax uses, so a
/// path is split on its syntax first and each piece percent-decoded after: one reading only.
pub fn path_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A figure for people: four significant digits, whole numbers from 1,000 up.
pub fn number(x: f64) -> String {
    if !x.is_finite() {
        return "–".into();
    }
    let magnitude = if x == 0.0 { 0 } else { x.abs().log10().floor() as i32 };
    if magnitude >= 3 {
        return thousands(x.round() as i64);
    }
    let decimals = (3 - magnitude).clamp(0, 12) as usize;
    format!("{x:.decimals$}")
}

/// A signed figure (a difference): `+` shown.
pub fn signed(x: f64) -> String {
    if x > 0.0 {
        format!("+{}", number(x))
    } else {
        number(x)
    }
}

/// A p-value: three decimals, two significant digits below 0.01, scientific below 0.001.
pub fn p_text(p: f64) -> String {
    if p > 0.0 && p < 1e-3 {
        format!("{p:.1e}")
    } else if p < 0.01 {
        format!("{p:.4}")
    } else {
        format!("{p:.3}")
    }
}

/// A level (0.95) as a percentage for text: `95`, `99.5`.
pub fn percent(level: f64) -> String {
    let text = format!("{:.2}", level * 100.0);
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// An integer count with thousands separators.
pub fn thousands(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if n < 0 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A list element's place in a data path: `list|field=value`, `&` joining the conditions,
/// every field and value written by [`path_segment`]. Raw: an attribute takes it through
/// [`escape`] (for the `&`).
pub fn element(list: &str, conditions: &[(&str, &str)]) -> String {
    let chosen: Vec<String> =
        conditions.iter().map(|(field, value)| format!("{}={}", path_segment(field), path_segment(value))).collect();
    format!("{list}|{}", chosen.join("&"))
}

/// A number as text with its exact value (`data-v`) and its place in the A/B API's report
/// (`data-f`): a path of `|`-separated keys, a list element chosen by `field=value` (`&` joins
/// several), completed by the `data-b` of every enclosing element, outermost first (the
/// section's is the experiment). Every name in a path is written by [`path_segment`], so it
/// cannot be taken for the syntax. The browser test resolves it
/// (`tests/experiment_page/browser.py`): split on `|`, `&` and `=`, then percent-decoded.
pub fn figure(path: &str, value: f64, text: &str) -> String {
    if !value.is_finite() {
        return "–".into();
    }
    format!(r#"<span data-f="{}" data-v="{value}">{}</span>"#, escape(path), escape(text))
}

/// A table cell holding a figure whose place in the report is its column's `data-col`, with
/// its row's `data-row` for `{row}`: for long tables, where a path per cell would be most of
/// the page.
pub fn cell(value: f64, text: &str) -> String {
    if !value.is_finite() {
        return "<td>–</td>".into();
    }
    format!(r#"<td data-v="{value}">{}</td>"#, escape(text))
}

/// A count as a figure.
pub fn count(path: &str, n: u64) -> String {
    figure(path, n as f64, &thousands(n as i64))
}

/// An interval `[low, high]` as two figures, or a dash.
pub fn interval(path: &str, bounds: Option<[f64; 2]>, format: fn(f64) -> String) -> String {
    match bounds {
        Some([low, high]) => {
            format!(
                "[{}, {}]",
                figure(&format!("{path}|0"), low, &format(low)),
                figure(&format!("{path}|1"), high, &format(high))
            )
        }
        None => "–".into(),
    }
}

/// An optional p-value as a figure, or a dash.
pub fn p_figure(path: &str, p: Option<f64>) -> String {
    p.map_or("–".into(), |p| figure(path, p, &p_text(p)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(number(0.123456), "0.1235");
        assert_eq!(number(12.3456), "12.35");
        assert_eq!(number(-0.0012345), "-0.001234");
        assert_eq!(number(0.0), "0.000");
        assert_eq!(number(12345.6), "12,346");
        assert_eq!(signed(0.5), "+0.5000");
        assert_eq!(p_text(0.04321), "0.043");
        assert_eq!(p_text(0.005321), "0.0053");
        assert_eq!(p_text(3.2e-7), "3.2e-7");
        assert_eq!(percent(0.95), "95");
        assert_eq!(percent(0.995), "99.5");
        assert_eq!(thousands(-1234567), "-1,234,567");
    }

    /// Undoes [`path_segment`], as the browser test's resolver does.
    fn decode(text: &str) -> String {
        let bytes = text.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' {
                out.push(u8::from_str_radix(&text[i + 1..i + 3], 16).unwrap());
                i += 3;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn names_in_data_paths_cannot_be_taken_for_the_syntax() {
        let names = ["a|b", "{row}", "x&y=z", "a=b&c=d|e", "\"q\" <i> & 'ü'", "50% off", "%7C", "", "ndcg@10"];
        for (first, second) in names.iter().flat_map(|f| names.iter().map(move |v| (f, v))) {
            let path = format!(
                "{}|metrics|{}",
                element("pairs", &[("ranker", first), ("opponent", second)]),
                path_segment(first)
            );
            assert!(!path.contains("{row}") && !path.contains('"') && !path.contains('<'), "{path}");
            // Split on the syntax, then decoded: the names come back, each in its place.
            let parts: Vec<&str> = path.split('|').collect();
            assert_eq!(parts.len(), 4, "{path}");
            let pairs: Vec<Vec<&str>> = parts[1].split('&').map(|c| c.split('=').collect()).collect();
            assert_eq!(pairs.len(), 2, "{path}");
            assert!(pairs.iter().all(|p| p.len() == 2), "{path}");
            let decoded = [pairs[0][0], pairs[0][1], pairs[1][0], pairs[1][1], parts[3]].map(decode);
            assert_eq!(decoded, ["ranker", first, "opponent", second, first], "{path}");
        }
        assert_eq!(element("variants", &[("variant", "a|b")]), "variants|variant=a%7Cb");
    }

    #[test]
    fn names_are_escaped_and_encoded() {
        assert_eq!(escape(r#"<a href="x">'&'</a>"#), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
        assert_eq!(path_segment("a b/é"), "a%20b%2F%C3%A9");
        assert_eq!(path_segment("a|b"), "a%7Cb");
        assert_eq!(path_segment("{row}"), "%7Brow%7D");
        assert_eq!(path_segment("x&y=z"), "x%26y%3Dz");
        assert_eq!(path_segment("50%"), "50%25");
        assert_eq!(figure("x|y", 0.1, "<0.1>"), r#"<span data-f="x|y" data-v="0.1">&lt;0.1&gt;</span>"#);
        assert_eq!(figure("x", f64::NAN, "nan"), "–");
        assert_eq!(interval("ci", None, number), "–");
    }
}

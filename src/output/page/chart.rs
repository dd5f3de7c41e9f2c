//! Line charts with interval bands as inline SVG: no script, no external asset, readable
//! without colour (each series has its own dash pattern, and every figure is also in a table).

use std::fmt::Write;

use super::text::escape;
use crate::time::EventTime;

/// The Okabe–Ito palette (Okabe and Ito 2008, "Color Universal Design"), distinguishable with
/// every common colour-vision deficiency; yellow left out, as it is too light on white.
pub const PALETTE: [&str; 7] = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#000000"];

/// Dash patterns, paired with the palette by series, so series differ in print and to anyone.
const DASHES: [&str; 4] = ["", "7 3", "2 3", "9 3 2 3"];

/// A series' colour.
pub fn colour(series: usize) -> &'static str {
    PALETTE[series % PALETTE.len()]
}

/// A series' dash pattern (empty: solid).
pub fn dash(series: usize) -> &'static str {
    DASHES[series % DASHES.len()]
}

/// One curve: `(time, value, band)`, where the band is the interval around the value; points
/// without a value are gaps.
pub struct Series<'a> {
    /// The variant (or pair) it belongs to: the `data-series` attribute the browser test counts.
    pub name: &'a str,
    /// Index into the palette and dash patterns.
    pub style: usize,
    /// Points in time order.
    pub points: Vec<(EventTime, f32, Option<[f32; 2]>)>,
    /// A second band drawn as dashed bounds (the fixed-horizon interval beside a filled
    /// anytime-valid sequence), per point.
    pub outline: Vec<(EventTime, [f32; 2])>,
}

const WIDTH: f64 = 480.0;
const HEIGHT: f64 = 180.0;
const LEFT: f64 = 52.0;
const RIGHT: f64 = 10.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 24.0;

/// Up to five round values spanning `[low, high]`.
fn ticks(low: f64, high: f64) -> Vec<f64> {
    let span = (high - low).max(f64::MIN_POSITIVE);
    let raw = span / 4.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * magnitude).find(|s| span / s <= 5.0).unwrap_or(raw);
    let first = (low / step).ceil() as i64;
    let last = (high / step).floor() as i64;
    (first..=last).take(6).map(|i| i as f64 * step).collect()
}

/// A tick label: short, and `0` for values within rounding of zero.
fn tick_label(value: f64, step: f64) -> String {
    if value.abs() < step * 1e-9 {
        return "0".into();
    }
    let decimals = (-step.log10().floor()).clamp(0.0, 8.0) as usize + 1;
    let text = format!("{value:.decimals$}");
    let text = if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.').to_string() } else { text };
    text
}

/// The time axis' label of an event time: the clock in UTC, with the date when the span
/// crosses days.
fn time_label(ms: EventTime, with_date: bool) -> String {
    let Some(t) = chrono::DateTime::from_timestamp_millis(ms) else { return String::new() };
    if with_date {
        t.format("%m-%d %H:%M").to_string()
    } else {
        t.format("%H:%M").to_string()
    }
}

/// The chart as an `<svg>` element: `title` is its accessible name; `zero` draws the line of
/// no difference and keeps it in range.
pub fn line_chart(title: &str, series: &[Series<'_>], zero: bool) -> String {
    let times = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let (t0, t1) = times.fold((EventTime::MAX, EventTime::MIN), |(a, b), t| (a.min(t), b.max(t)));
    let mut values: Vec<f64> = Vec::new();
    for s in series {
        for (_, v, band) in &s.points {
            values.push(f64::from(*v));
            values.extend(band.iter().flatten().map(|&b| f64::from(b)));
        }
        values.extend(s.outline.iter().flat_map(|(_, b)| b.iter().map(|&x| f64::from(x))));
    }
    values.retain(|v| v.is_finite());
    if zero {
        values.push(0.0);
    }
    let (mut low, mut high) = values.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| (a.min(v), b.max(v)));
    if !low.is_finite() || t0 > t1 {
        return String::new();
    }
    if high - low < 1e-12 {
        (low, high) = (low - 0.5f64.max(low.abs() * 0.1), high + 0.5f64.max(high.abs() * 0.1));
    }
    let pad = (high - low) * 0.05;
    let (low, high) = (low - pad, high + pad);
    let x = |t: EventTime| {
        if t1 == t0 {
            LEFT + (WIDTH - LEFT - RIGHT) / 2.0
        } else {
            LEFT + (t - t0) as f64 / (t1 - t0) as f64 * (WIDTH - LEFT - RIGHT)
        }
    };
    let y = |v: f64| TOP + (high - v) / (high - low) * (HEIGHT - TOP - BOTTOM);
    let mut svg = String::with_capacity(4096);
    let _ = write!(
        svg,
        r#"<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{title}"><title>{title}</title>"#,
        title = escape(title)
    );
    let grid = ticks(low, high);
    let step = if grid.len() > 1 { grid[1] - grid[0] } else { (high - low).abs().max(1e-12) };
    for tick in &grid {
        let _ = write!(
            svg,
            r#"<line class="grid" x1="{LEFT}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}"/><text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            WIDTH - RIGHT,
            LEFT - 4.0,
            y(*tick) + 4.0,
            tick_label(*tick, step),
            y = y(*tick),
        );
    }
    if zero {
        let _ = write!(
            svg,
            r#"<line class="zero" x1="{LEFT}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}"/>"#,
            WIDTH - RIGHT,
            y = y(0.0)
        );
    }
    let with_date = t1 - t0 >= 86_400_000 || time_label(t0, true)[..5] != time_label(t1, true)[..5];
    let _ = write!(
        svg,
        r#"<text class="tick" x="{LEFT}" y="{:.1}">{}</text><text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">{} UTC</text>"#,
        HEIGHT - 6.0,
        time_label(t0, with_date),
        WIDTH - RIGHT,
        HEIGHT - 6.0,
        time_label(t1, with_date)
    );
    for s in series {
        let colour = colour(s.style);
        let _ = write!(svg, r#"<g class="series" data-series="{}">"#, escape(s.name));
        // The band: upper bounds left to right, then lower bounds back, over runs of points
        // that have one.
        for run in s.points.split(|p| p.2.is_none_or(|b| !(b[0].is_finite() && b[1].is_finite()))) {
            if run.is_empty() {
                continue;
            }
            svg.push_str(r#"<polygon class="band" points=""#);
            for (t, _, band) in run {
                let _ = write!(svg, "{:.1},{:.1} ", x(*t), y(f64::from(band.map_or(0.0, |b| b[1]))));
            }
            for (t, _, band) in run.iter().rev() {
                let _ = write!(svg, "{:.1},{:.1} ", x(*t), y(f64::from(band.map_or(0.0, |b| b[0]))));
            }
            let _ = write!(svg, r#"" fill="{colour}"/>"#);
        }
        for bound in 0..2 {
            if s.outline.is_empty() {
                break;
            }
            svg.push_str(r#"<polyline class="outline" points=""#);
            for (t, b) in &s.outline {
                let _ = write!(svg, "{:.1},{:.1} ", x(*t), y(f64::from(b[bound])));
            }
            let _ = write!(svg, r#"" stroke="{colour}"/>"#);
        }
        let dash = match dash(s.style) {
            "" => String::new(),
            d => format!(r#" stroke-dasharray="{d}""#),
        };
        for run in s.points.split(|p| !p.1.is_finite()) {
            match run {
                [] => {}
                [(t, v, _)] => {
                    let _ = write!(
                        svg,
                        r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"/>"#,
                        x(*t),
                        y(f64::from(*v))
                    );
                }
                _ => {
                    svg.push_str(r#"<polyline class="line" points=""#);
                    for (t, v, _) in run {
                        let _ = write!(svg, "{:.1},{:.1} ", x(*t), y(f64::from(*v)));
                    }
                    let _ = write!(svg, r#"" stroke="{colour}"{dash}/>"#);
                }
            }
        }
        svg.push_str("</g>");
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_inside() {
        let t = ticks(0.12, 0.58);
        assert!(t.len() >= 2 && t.len() <= 6, "{t:?}");
        assert!(t.iter().all(|v| (0.12..=0.58).contains(v)), "{t:?}");
        assert_eq!(tick_label(0.2, 0.1), "0.2");
        assert_eq!(tick_label(1e-17, 0.1), "0");
        assert_eq!(tick_label(1500.0, 500.0), "1500");
    }

    #[test]
    fn one_group_per_series_with_its_band_and_gaps() {
        let a = Series {
            name: "control",
            style: 0,
            points: vec![(0, 0.3, Some([0.2, 0.4])), (60_000, f32::NAN, None), (120_000, 0.35, Some([0.3, 0.4]))],
            outline: Vec::new(),
        };
        let b = Series {
            name: "<treatment>",
            style: 1,
            points: vec![(0, 0.31, None), (60_000, 0.33, None)],
            outline: vec![(0, [0.1, 0.5]), (60_000, [0.2, 0.45])],
        };
        let svg = line_chart("MRR & more", &[a, b], true);
        assert_eq!(svg.matches(r#"<g class="series""#).count(), 2);
        assert!(svg.contains(r#"data-series="&lt;treatment&gt;""#) && svg.contains("MRR &amp; more"));
        // Two runs of the control's band (the gap splits it), none for the treatment.
        assert_eq!(svg.matches(r#"class="band""#).count(), 2);
        // The control's two single points are dots; the treatment's run is a line, dashed.
        assert_eq!(svg.matches("<circle").count(), 2);
        assert!(svg.contains(r#"stroke-dasharray="7 3""#));
        assert_eq!(svg.matches(r#"class="outline""#).count(), 2);
        assert!(svg.contains(r#"class="zero""#));
    }

    #[test]
    fn no_points_no_chart() {
        assert_eq!(line_chart("x", &[], false), "");
        let flat = Series { name: "a", style: 0, points: vec![(5, 1.0, None)], outline: Vec::new() };
        assert!(line_chart("x", &[flat], false).contains("<circle"));
    }
}

//! Reports for people: small, dependency-free SVG charts (grouped bar charts) that any browser
//! shows. Pure string building, so the simulator and the accounting reports share it.

pub mod accounting;
pub mod energy_note;

use std::fmt::Write;

/// One panel: a title, a unit, and a value per label.
pub struct BarPanel<'a> {
    pub title: &'a str,
    pub unit: &'a str,
    pub values: Vec<(String, f64)>,
    /// Label whose bar is drawn in the highlight colour.
    pub highlight: Option<&'a str>,
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A "nice" axis maximum: 1, 2, 2.5 or 5 times a power of ten, at least `v`.
fn nice_max(v: f64) -> f64 {
    if v.is_nan() || v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|&m| m >= v)
        .unwrap_or(10.0 * p)
}

/// Horizontal bar panels stacked vertically, one bar per label, with values printed.
pub fn bar_chart_svg(title: &str, panels: &[BarPanel<'_>]) -> String {
    let (width, left, right, bar_h, gap, head) = (760.0, 150.0, 110.0, 22.0, 6.0, 56.0);
    let panel_h = |p: &BarPanel<'_>| head + (bar_h + gap) * p.values.len() as f64 + 20.0;
    let height: f64 = 50.0 + panels.iter().map(panel_h).sum::<f64>();
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height:.0}" viewBox="0 0 {width} {height:.0}" font-family="sans-serif" font-size="13">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="30" font-size="17" font-weight="bold" text-anchor="middle">{}</text>"#,
        width / 2.0,
        escape(title)
    );
    let mut y0 = 50.0;
    for p in panels {
        let max = nice_max(p.values.iter().map(|v| v.1).fold(0.0, f64::max));
        let plot_w = width - left - right;
        let _ = writeln!(
            s,
            r#"<text x="{left}" y="{:.1}" font-size="15" font-weight="bold">{} ({})</text>"#,
            y0 + 22.0,
            escape(p.title),
            escape(p.unit)
        );
        let axis_y = y0 + head - 8.0;
        for k in 0..=4 {
            let x = left + plot_w * f64::from(k) / 4.0;
            let v = max * f64::from(k) / 4.0;
            let _ = writeln!(
                s,
                r##"<line x1="{x:.1}" y1="{axis_y:.1}" x2="{x:.1}" y2="{:.1}" stroke="#ddd"/>"##,
                y0 + panel_h(p) - 20.0
            );
            let _ = writeln!(
                s,
                r##"<text x="{x:.1}" y="{:.1}" font-size="11" fill="#555" text-anchor="middle">{}</text>"##,
                axis_y - 4.0,
                short(v)
            );
        }
        for (i, (label, v)) in p.values.iter().enumerate() {
            let y = y0 + head + (bar_h + gap) * i as f64;
            let w = if max > 0.0 {
                plot_w * (v / max).clamp(0.0, 1.0)
            } else {
                0.0
            };
            let colour = if p.highlight == Some(label.as_str()) {
                "#d95f02"
            } else {
                "#7570b3"
            };
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                left - 8.0,
                y + bar_h * 0.72,
                escape(label)
            );
            let _ = writeln!(
                s,
                r#"<rect x="{left}" y="{y:.1}" width="{w:.1}" height="{bar_h}" fill="{colour}"/>"#
            );
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}">{}</text>"#,
                left + w + 6.0,
                y + bar_h * 0.72,
                short(*v)
            );
        }
        y0 += panel_h(p);
    }
    s.push_str("</svg>\n");
    s
}

/// The value at quantile `p` (0..=1, nearest rank) of an ascending slice.
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    let last = sorted.len().checked_sub(1)?;
    // Within 0..=last: p is clamped to 0..=1 first.
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let idx = (last as f64 * p.clamp(0.0, 1.0)).round() as usize;
    sorted.get(idx.min(last)).copied()
}

/// A compact number: 3 significant digits, k/M suffixes.
fn short(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".to_owned()
    } else if a >= 1e6 {
        format!("{:.3}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_has_a_bar_per_value_and_escapes_labels() {
        let svg = bar_chart_svg(
            "a <b>",
            &[BarPanel {
                title: "energy",
                unit: "kWh",
                values: vec![("x&y".into(), 10.0), ("heshare".into(), 5.0)],
                highlight: Some("heshare"),
            }],
        );
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<rect x=").count(), 2);
        assert!(svg.contains("a &lt;b&gt;") && svg.contains("x&amp;y"));
        assert!(svg.contains("#d95f02"));
        assert_eq!(nice_max(7.3), 10.0);
        assert_eq!(nice_max(2.1), 2.5);
        assert_eq!(short(12345.0), "12.3k");
        assert_eq!(short(0.0), "0");
    }
}

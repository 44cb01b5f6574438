//! A small SVG writer: a frame with margins, axes with ticks and labels, and the marks the
//! figures are made of. Styling comes from classes (the dashboard's stylesheet, or the one
//! a standalone file embeds), so that the figures follow the page.

use std::fmt::Write;

use super::axis::Axis;

/// Width of a figure that shares a row, in SVG units (and at most in pixels: a figure
/// shrinks to its container but never grows, so its text keeps its size).
pub(crate) const NARROW: f64 = 640.0;
/// Width of a figure that has a row of its own.
pub(crate) const WIDE: f64 = 1180.0;

/// Where the plotting area sits inside the figure.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Frame {
    /// Left edge of the plotting area.
    pub left: f64,
    /// Top edge.
    pub top: f64,
    /// Width of the plotting area.
    pub width: f64,
    /// Height of the plotting area.
    pub height: f64,
}

impl Frame {
    /// The usual frame of a figure `width` wide and `height` tall: room for tick labels
    /// left and below.
    pub(crate) fn standard(width: f64, height: f64) -> Self {
        Frame {
            left: 64.0,
            top: 16.0,
            width: width - 64.0 - 20.0,
            height: height - 16.0 - 48.0,
        }
    }

    /// [`Frame::standard`] with a band above the plotting area for a key or a caption, so
    /// that it never hides a point.
    pub(crate) fn below_a_key(width: f64, height: f64) -> Self {
        let standard = Self::standard(width, height);
        Frame {
            top: standard.top + 14.0,
            height: standard.height - 14.0,
            ..standard
        }
    }

    /// The x coordinate of a position from 0 (left) to 1 (right).
    pub(crate) fn x(&self, position: f64) -> f64 {
        self.left + position * self.width
    }

    /// The y coordinate of a position from 0 (bottom) to 1 (top).
    pub(crate) fn y(&self, position: f64) -> f64 {
        self.top + (1.0 - position) * self.height
    }
}

/// An SVG document being written.
pub(crate) struct Svg {
    width: f64,
    height: f64,
    body: String,
}

impl Svg {
    /// An empty figure `width` wide and `height` tall.
    pub(crate) fn new(width: f64, height: f64) -> Self {
        Svg {
            width,
            height,
            body: String::new(),
        }
    }

    /// The document written so far, to append already escaped SVG to.
    pub(crate) fn body_mut(&mut self) -> &mut String {
        &mut self.body
    }

    /// Adds raw, already escaped SVG.
    pub(crate) fn raw(&mut self, text: &str) {
        self.body.push_str(text);
    }

    /// Draws a horizontal axis along the bottom of `frame` with its grid lines and a title.
    pub(crate) fn x_axis(&mut self, frame: &Frame, axis: &Axis, title: &str) {
        let bottom = frame.top + frame.height;
        for (position, label) in axis.ticks(6) {
            let x = frame.x(position);
            let _ = write!(
                self.body,
                r#"<line class="grid" x1="{x:.1}" x2="{x:.1}" y1="{:.1}" y2="{bottom:.1}"/><text class="tick" x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                frame.top,
                bottom + 16.0,
                escape(&label)
            );
        }
        let _ = write!(
            self.body,
            r#"<line class="axis" x1="{:.1}" x2="{:.1}" y1="{bottom:.1}" y2="{bottom:.1}"/><text class="axis-title" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            frame.left,
            frame.left + frame.width,
            frame.x(0.5),
            bottom + 38.0,
            escape(title)
        );
    }

    /// Draws a vertical axis along the left of `frame` with its grid lines and a title.
    pub(crate) fn y_axis(&mut self, frame: &Frame, axis: &Axis, title: &str) {
        self.y_axis_ticks(frame, axis);
        let (x, y) = (14.0, frame.y(0.5));
        let _ = write!(
            self.body,
            r#"<text class="axis-title" x="{x}" y="{y:.1}" text-anchor="middle" transform="rotate(-90 {x} {y:.1})">{}</text>"#,
            escape(title)
        );
    }

    /// Draws a vertical axis along the left of `frame` with its ticks and grid lines.
    pub(crate) fn y_axis_ticks(&mut self, frame: &Frame, axis: &Axis) {
        let right = frame.left + frame.width;
        for (position, label) in axis.ticks(5) {
            let y = frame.y(position);
            let _ = write!(
                self.body,
                r#"<line class="grid" x1="{:.1}" x2="{right:.1}" y1="{y:.1}" y2="{y:.1}"/><text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                frame.left,
                frame.left - 8.0,
                y + 4.0,
                escape(&label)
            );
        }
        let _ = write!(
            self.body,
            r#"<line class="axis" x1="{:.1}" x2="{:.1}" y1="{:.1}" y2="{:.1}"/>"#,
            frame.left,
            frame.left,
            frame.top,
            frame.top + frame.height,
        );
    }

    /// A point of trial `number` with a tooltip; `class` picks its look.
    pub(crate) fn point(&mut self, x: f64, y: f64, class: &str, number: u64, tip: &str) {
        let _ = write!(
            self.body,
            r#"<circle class="{class}" data-trial="{number}" cx="{x:.1}" cy="{y:.1}" r="4"><title>{}</title></circle>"#,
            escape(tip)
        );
    }

    /// A point of trial `number` filled with `colour`, with a tooltip.
    pub(crate) fn point_filled(&mut self, x: f64, y: f64, colour: &str, number: u64, tip: &str) {
        let _ = write!(
            self.body,
            r#"<circle class="pt" fill="{colour}" data-trial="{number}" cx="{x:.1}" cy="{y:.1}" r="3.5"><title>{}</title></circle>"#,
            escape(tip)
        );
    }

    /// A polyline through `points`; `attributes` are added as written.
    pub(crate) fn polyline(&mut self, points: &[(f64, f64)], class: &str, attributes: &str) {
        if points.is_empty() {
            return;
        }
        let mut d = String::with_capacity(points.len() * 14);
        for (i, (x, y)) in points.iter().enumerate() {
            let _ = write!(d, "{}{x:.1},{y:.1}", if i == 0 { "M" } else { "L" });
        }
        let _ = write!(self.body, r#"<path class="{class}" d="{d}" {attributes}/>"#);
    }

    /// Text at (x, y); `anchor` is start, middle or end.
    pub(crate) fn text(&mut self, x: f64, y: f64, anchor: &str, class: &str, text: &str) {
        let _ = write!(
            self.body,
            r#"<text class="{class}" x="{x:.1}" y="{y:.1}" text-anchor="{anchor}">{}</text>"#,
            escape(text)
        );
    }

    /// The finished document.
    pub(crate) fn finish(self, label: &str) -> String {
        format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" class="figure" viewBox="0 0 {w} {h}" style="max-width:{w}px" role="img" aria-label="{label}"><rect class="background" width="{w}" height="{h}"/>{body}</svg>"#,
            w = self.width,
            h = self.height,
            label = escape(label),
            body = self.body
        )
    }
}

/// A figure that says why there is nothing to draw.
pub(crate) fn message(text: &str) -> String {
    let mut svg = Svg::new(NARROW, 140.0);
    svg.text(NARROW / 2.0, 76.0, "middle", "empty", text);
    svg.finish(text)
}

/// Text made safe for XML and HTML.
pub(crate) fn escape(text: &str) -> String {
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

/// A colour for a share `t` from 0 (best) to 1 (worst), on a perceptually even scale
/// (viridis' ends reversed: good trials dark, poor ones light).
pub(crate) fn value_colour(t: f64) -> String {
    const STOPS: [(f64, f64, f64); 5] = [
        (68.0, 1.0, 84.0),
        (59.0, 82.0, 139.0),
        (33.0, 145.0, 140.0),
        (94.0, 201.0, 98.0),
        (253.0, 231.0, 37.0),
    ];
    let t = if t.is_finite() {
        t.clamp(0.0, 1.0)
    } else {
        1.0
    } * (STOPS.len() - 1) as f64;
    let i = (t.floor() as usize).min(STOPS.len() - 2);
    let f = t - i as f64;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    let mix = |x: f64, y: f64| (x + (y - x) * f).round() as u8;
    format!(
        "#{:02x}{:02x}{:02x}",
        mix(a.0, b.0),
        mix(a.1, b.1),
        mix(a.2, b.2)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_colours_are_hex() {
        assert_eq!(
            escape(r#"<a href="x">&'"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(value_colour(0.0), "#440154");
        assert_eq!(value_colour(1.0), "#fde725");
        assert_eq!(value_colour(f64::NAN), "#fde725");
    }
}

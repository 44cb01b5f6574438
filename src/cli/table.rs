//! Plain text tables and CSV, written by hand: two small formats, no dependency needed.

use std::borrow::Cow;

use hptune::study::space::written;

/// `text` with its control characters (C0, DEL, C1: a terminal's escape sequences, line
/// breaks, tabs) written as Rust escapes (`\u{1b}`), so that what workers and study files
/// hold is shown to people, never obeyed by their terminal. Tables and log lines are for
/// people, on a terminal or in a file; CSV and JSON carry the data as it is.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Columns aligned with two spaces between them; numbers are right-aligned; control
/// characters escaped ([`printable`]).
pub fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let header: Vec<Cow<str>> = header.iter().map(|h| printable(h)).collect();
    let rows: Vec<Vec<Cow<str>>> = rows
        .iter()
        .map(|row| row.iter().map(|cell| printable(cell)).collect())
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let numeric: Vec<bool> = (0..header.len())
        .map(|i| {
            rows.iter().all(|r| {
                r.get(i)
                    .is_none_or(|c| c.is_empty() || c.parse::<f64>().is_ok())
            })
        })
        .collect();
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .zip(&numeric)
            .map(|((cell, &w), &right)| pad(cell, w, right))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// `cell` padded with spaces to `width` characters, on the left when `right`. By hand: std's
/// `{:>w$}` panics on a width past 65,535 (a cell of 10,000 parameters).
fn pad(cell: &str, width: usize, right: bool) -> String {
    let fill = " ".repeat(width.saturating_sub(cell.chars().count()));
    if right {
        fill + cell
    } else {
        cell.to_string() + &fill
    }
}

/// A number for people: six significant digits, no trailing zeros, [`written`] in exponent
/// form far from 1 (`0.000123457`, `41.5`, `9.87654e-7`). JSON, CSV and flags keep every
/// digit.
pub fn short(value: f64) -> String {
    if !value.is_finite() || value == 0.0 {
        return value.to_string();
    }
    let rounded: f64 = format!("{value:.5e}").parse().unwrap_or(value);
    written(rounded)
}

/// Comma-separated values; a cell with a comma, quote or line break is quoted.
pub fn csv(header: &[&str], rows: &[Vec<String>]) -> String {
    let quote = |cell: &str| {
        if cell.contains([',', '"', '\n', '\r']) {
            format!("\"{}\"", cell.replace('"', "\"\""))
        } else {
            cell.to_string()
        }
    };
    let mut out = header
        .iter()
        .map(|h| quote(h))
        .collect::<Vec<_>>()
        .join(",");
    out.push('\n');
    for row in rows {
        out.push_str(&row.iter().map(|c| quote(c)).collect::<Vec<_>>().join(","));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_text_left_and_numbers_right() {
        let rows = vec![
            vec!["a".to_string(), "1.5".to_string()],
            vec!["long".to_string(), "10".to_string()],
        ];
        assert_eq!(
            render(&["name", "value"], &rows),
            "name  value\na       1.5\nlong     10\n"
        );
    }

    #[test]
    fn escapes_control_characters_in_tables_only() {
        let link = "\u{1b}]8;;http://x\u{7}a\tb\u{9b}2J\nc";
        let rows = vec![vec![link.to_string(), "é".to_string()]];
        let table = render(&["name", "value"], &rows);
        assert_eq!(
            table.lines().nth(1),
            Some("\\u{1b}]8;;http://x\\u{7}a\\tb\\u{9b}2J\\nc  é")
        );
        assert!(csv(&["name", "value"], &rows).contains(link));
    }

    #[test]
    fn pads_cells_wider_than_a_format_width() {
        let wide = "x".repeat(70_000);
        let rows = vec![vec![wide.clone(), "1".to_string()]];
        let table = render(&["parameters", "value"], &rows);
        assert_eq!(
            table.lines().nth(1),
            Some(format!("{wide}      1").as_str())
        );
        assert_eq!(table.lines().next().unwrap().len(), 70_000 + 2 + 5);
    }

    #[test]
    fn shortens_numbers_to_six_significant_digits() {
        assert_eq!(short(0.9900044945752011), "0.990004");
        assert_eq!(short(-3.429563427826141), "-3.42956");
        assert_eq!(short(1.2345678e-5), "0.0000123457");
        assert_eq!(short(16.0), "16");
        // Far from 1 the digits are kept and the zeros are not: a value near the bound of a
        // log-scale range would otherwise fill a table's row.
        assert_eq!(short(1.0e-6), "0.000001");
        assert_eq!(short(9.87654321e-7), "9.87654e-7");
        assert_eq!(short(1.0e-300), "1e-300");
        assert_eq!(short(-2.5e20), "-2.5e20");
        assert_eq!(short(1.0e15), "1000000000000000");
    }

    #[test]
    fn quotes_csv_cells_that_need_it() {
        let rows = vec![vec!["a,b".to_string(), "say \"hi\"".to_string()]];
        assert_eq!(csv(&["x", "y"], &rows), "x,y\n\"a,b\",\"say \"\"hi\"\"\"\n");
    }
}

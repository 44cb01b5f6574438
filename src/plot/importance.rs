//! Parameter importance (PED-ANOVA over the succeeded trials) as horizontal bars, most
//! important first.

use super::StudyData;
use super::axis::format_number;
use super::svg::{NARROW, Svg, escape};
use crate::importance::ped_anova;

pub(super) fn draw(data: &StudyData) -> String {
    let succeeded = match data.results(3, "Importance") {
        Ok(succeeded) => succeeded,
        Err(figure) => return figure,
    };
    let trials: Vec<_> = succeeded.iter().map(|(t, v)| (&t.params, *v)).collect();
    let importances = ped_anova(data.space.parameters(), data.goal(), &trials);
    let largest = importances.iter().map(|i| i.value).fold(0.0, f64::max);
    let height = 56.0 + 34.0 * importances.len() as f64;
    let mut svg = Svg::new(NARROW, height);
    let (left, width) = (140.0, NARROW - 140.0 - 80.0);
    for (row, importance) in importances.iter().enumerate() {
        let y = 20.0 + row as f64 * 34.0;
        let share = if largest > 0.0 {
            importance.value / largest
        } else {
            0.0
        };
        svg.text(
            left - 12.0,
            y + 17.0,
            "end",
            "bar-label",
            &importance.parameter,
        );
        svg.raw(&format!(
            r#"<rect class="bar-track" x="{left}" y="{y:.1}" width="{width:.1}" height="24" rx="4"/><rect class="bar" data-param="{}" data-importance="{}" x="{left}" y="{y:.1}" width="{:.1}" height="24" rx="4"><title>{}: {}</title></rect>"#,
            escape(&importance.parameter),
            importance.value,
            (share * width).max(2.0),
            escape(&importance.parameter),
            format_number(importance.value)
        ));
        svg.text(
            left + width + 10.0,
            y + 17.0,
            "start",
            "tick",
            &format_number(importance.value),
        );
    }
    svg.text(
        left,
        height - 12.0,
        "start",
        "caption",
        &format!(
            "PED-ANOVA over {} succeeded trials (top 10% against all, {}).",
            succeeded.len(),
            data.goal().as_str()
        ),
    );
    svg.finish("parameter importance")
}

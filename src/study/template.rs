//! The argument template of a trial's command line: text with `{id}` placeholders.

/// The placeholders of an argument template: `{id}` names a parameter, `{trial_id}` and
/// `{study}` the trial and the study; `{{` and `}}` stand for braces.
pub(crate) const TEMPLATE_BUILTINS: [&str; 2] = ["trial_id", "study"];

/// Splits a template into literal text and placeholder names.
pub(crate) fn template_parts(template: &str) -> Result<Vec<TemplatePart<'_>>, String> {
    let mut parts = Vec::new();
    let mut rest = template;
    let mut literal = String::new();
    while let Some(i) = rest.find(['{', '}']) {
        literal.push_str(&rest[..i]);
        let tail = &rest[i..];
        if tail.starts_with("{{") || tail.starts_with("}}") {
            literal.push_str(&tail[..1]);
            rest = &tail[2..];
        } else if tail.starts_with('}') {
            return Err(format!(
                "unmatched '}}' in '{template}': write '}}}}' for a literal brace"
            ));
        } else {
            let end = tail
                .find('}')
                .ok_or_else(|| format!("unclosed '{{' in '{template}'"))?;
            if !literal.is_empty() {
                parts.push(TemplatePart::Text(std::mem::take(&mut literal)));
            }
            parts.push(TemplatePart::Placeholder(&tail[1..end]));
            rest = &tail[end + 1..];
        }
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        parts.push(TemplatePart::Text(literal));
    }
    Ok(parts)
}

/// A piece of an argument template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TemplatePart<'a> {
    /// Text copied as is.
    Text(String),
    /// A `{name}` to fill in.
    Placeholder(&'a str),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_split_into_text_and_placeholders() {
        assert_eq!(
            template_parts("--lr={lr}{{x}}").unwrap(),
            vec![
                TemplatePart::Text("--lr=".into()),
                TemplatePart::Placeholder("lr"),
                TemplatePart::Text("{x}".into()),
            ]
        );
        assert!(template_parts("{lr").is_err());
        assert!(template_parts("lr}").is_err());
    }
}

//! AWS credentials from the standard chain's first two links: the variables
//! `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` (and `AWS_SESSION_TOKEN`), else the shared
//! credentials file (`AWS_SHARED_CREDENTIALS_FILE`, default `~/.aws/credentials`) at the
//! profile `AWS_PROFILE` (default `default`). Requests are signed with SigV4 by `aws-sigv4`.

use std::path::PathBuf;
use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;

use crate::executor::remote::http::RemoteError;

/// An access key, its secret and maybe a session token; `Debug` shows none of them.
#[derive(Clone)]
pub(crate) struct AwsCredentials {
    access_key_id: String,
    secret_access_key: String,
    session_token: Option<String>,
}

impl std::fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AwsCredentials(***)")
    }
}

impl AwsCredentials {
    /// The credentials of this process, from the environment or the shared file.
    pub(crate) fn from_environment() -> Result<Self, RemoteError> {
        let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
        if let (Some(id), Some(secret)) = (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")) {
            return Ok(Self {
                access_key_id: id,
                secret_access_key: secret,
                session_token: var("AWS_SESSION_TOKEN"),
            });
        }
        let path = var("AWS_SHARED_CREDENTIALS_FILE")
            .map(PathBuf::from)
            .or_else(|| super::home().map(|h| h.join(".aws/credentials")));
        let profile = var("AWS_PROFILE").unwrap_or_else(|| "default".into());
        let missing = || {
            RemoteError::Credentials(format!(
                "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or write profile '{profile}' in {}",
                path.as_ref()
                    .map_or("~/.aws/credentials".into(), |p| p.display().to_string())
            ))
        };
        let text = path
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .ok_or_else(missing)?;
        let section = profile_section(&text, &profile);
        let get = |key: &str| {
            section
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        match (get("aws_access_key_id"), get("aws_secret_access_key")) {
            (Some(id), Some(secret)) => Ok(Self {
                access_key_id: id,
                secret_access_key: secret,
                session_token: get("aws_session_token"),
            }),
            _ => Err(missing()),
        }
    }

    /// The headers that sign a request for `service` in `region` with SigV4
    /// (`Authorization`, `X-Amz-Date`, and `X-Amz-Security-Token` with a session token).
    pub(crate) fn sign(
        &self,
        region: &str,
        service: &str,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Vec<(String, String)>, RemoteError> {
        let failed = |e: &dyn std::fmt::Display| {
            RemoteError::Credentials(format!("cannot sign the request with SigV4: {e}"))
        };
        let identity = Credentials::new(
            &self.access_key_id,
            &self.secret_access_key,
            self.session_token.clone(),
            None,
            "hptune",
        )
        .into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(region)
            .name(service)
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| failed(&e))?
            .into();
        let request = SignableRequest::new(
            method,
            url,
            headers.iter().copied(),
            SignableBody::Bytes(body),
        )
        .map_err(|e| failed(&e))?;
        let (instructions, _signature) =
            sign(request, &params).map_err(|e| failed(&e))?.into_parts();
        Ok(instructions
            .headers()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect())
    }
}

/// The `key = value` lines of `[profile]` in an INI file.
fn profile_section(text: &str, profile: &str) -> Vec<(String, String)> {
    let mut inside = false;
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') && line.ends_with(']') {
            inside = line[1..line.len() - 1].trim() == profile;
        } else if inside
            && !line.starts_with(['#', ';'])
            && let Some((k, v)) = line.split_once('=')
        {
            out.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_profile_asked_for() {
        let text = "[default]\naws_access_key_id = A\n\n[work]\n# comment\naws_access_key_id=B\naws_secret_access_key = s=x\n";
        assert_eq!(
            profile_section(text, "work"),
            [
                ("aws_access_key_id".to_string(), "B".to_string()),
                ("aws_secret_access_key".to_string(), "s=x".to_string())
            ]
        );
        assert!(profile_section(text, "none").is_empty());
    }

    #[test]
    fn signs_with_an_authorization_header_naming_the_scope() {
        let credentials = AwsCredentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            session_token: Some("session".into()),
        };
        let headers = credentials
            .sign(
                "eu-west-1",
                "sagemaker",
                "POST",
                "https://api.sagemaker.eu-west-1.amazonaws.com/",
                &[("x-amz-target", "SageMaker.DescribeTrainingJob")],
                b"{}",
            )
            .unwrap();
        let get = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        };
        let authorization = get("authorization").unwrap();
        assert!(
            authorization.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"),
            "{authorization}"
        );
        assert!(authorization.contains("/eu-west-1/sagemaker/aws4_request"));
        assert!(authorization.contains("x-amz-target"));
        assert!(!authorization.contains("wJalr"));
        assert_eq!(get("x-amz-security-token"), Some("session"));
        assert!(get("x-amz-date").is_some());
        assert!(!format!("{credentials:?}").contains("AKID"));
    }
}

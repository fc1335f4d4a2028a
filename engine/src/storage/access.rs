//! How a store is reached beyond its location: whose credentials sign the requests, and how
//! failed requests are retried.
//!
//! Credentials come from the user's options (a USER MAPPING). The standard credential chain —
//! environment variables, web identity, container and instance metadata, application default
//! credentials — acts as the *server's* identity, not the user's, so it is used only when
//! [`StoreSettings::credential_chain`] says so (a server option only superusers may set).
//! Without it, the options must name credentials of their own, and options that make the
//! store read the server's files or its metadata endpoints are refused.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::{ClientConfigKey, ObjectStore, RetryConfig};

use super::{Scheme, StorageUri};
use crate::error::{Error, ErrorKind, Result};

/// Everything but the location that opening a store takes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct StoreSettings {
    /// Credential and client options, by object_store's names (`aws_access_key_id`,
    /// `azure_storage_account_key`, `timeout`, ...).
    pub options: BTreeMap<String, String>,
    /// Whether credentials may come from the standard chain of the process's environment
    /// when the options name none.
    pub credential_chain: bool,
    pub retry: RetrySettings,
}

/// The URLs that the options `options` send a store's requests to instead of the cloud's own
/// endpoints, by option name: a role that may name any of them can make the database server
/// send requests, with whatever it signs, to any address it can reach.
pub fn endpoints_named(options: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let yes = |value: &str| matches!(value.trim().to_ascii_lowercase().as_str(), "true" | "1" | "yes" | "on");
    options
        .iter()
        .filter_map(|(name, value)| {
            let lower = name.to_ascii_lowercase();
            let endpoint = matches!(AmazonS3ConfigKey::from_str(&lower), Ok(AmazonS3ConfigKey::Endpoint))
                || matches!(AzureConfigKey::from_str(&lower), Ok(AzureConfigKey::Endpoint))
                || matches!(ClientConfigKey::from_str(&lower), Ok(ClientConfigKey::ProxyUrl));
            if endpoint {
                Some((name.clone(), value.clone()))
            } else if matches!(AzureConfigKey::from_str(&lower), Ok(AzureConfigKey::UseEmulator)) && yes(value) {
                // Azurite's address, which the emulator option sends every request to.
                Some((name.clone(), "http://127.0.0.1:10000".to_owned()))
            } else if matches!(GoogleConfigKey::from_str(&lower), Ok(GoogleConfigKey::ServiceAccountKey)) {
                // object_store sends every request to the key's `gcs_base_url` (an emulator's
                // address, with `disable_oauth`); a key it cannot read names none it would use,
                // unless it looks as if it might (then no endpoint is allowed).
                match serde_json::from_str::<serde_json::Value>(value) {
                    Ok(key) => key.get("gcs_base_url").map(|url| (name.clone(), url.as_str().unwrap_or_default().to_owned())),
                    Err(_) if value.contains("gcs_base_url") => Some((name.clone(), String::new())),
                    Err(_) => None,
                }
            } else {
                None
            }
        })
        .collect()
}

/// Whether requests to `endpoint` are allowed by one of `allowed` (URLs): the same scheme,
/// host and port (a URL that does not parse allows nothing).
pub fn endpoint_allowed(endpoint: &str, allowed: &[String]) -> bool {
    let Ok(endpoint) = url::Url::parse(endpoint.trim()) else { return false };
    allowed.iter().filter_map(|a| url::Url::parse(a.trim()).ok()).any(|a| {
        a.scheme() == endpoint.scheme()
            && a.host_str().map(str::to_ascii_lowercase) == endpoint.host_str().map(str::to_ascii_lowercase)
            && a.port_or_known_default() == endpoint.port_or_known_default()
    })
}

/// Refuses options that name an endpoint `allowed` does not allow (the option's value is not
/// part of the message: it may hold a secret of the user's own).
pub fn check_endpoints(options: &BTreeMap<String, String>, allowed: Option<&[String]>) -> Result<()> {
    let Some(allowed) = allowed else { return Ok(()) };
    match endpoints_named(options).into_iter().find(|(_, endpoint)| !endpoint_allowed(endpoint, allowed)) {
        None => Ok(()),
        Some((name, _)) => Err(Error::new(
            ErrorKind::PermissionDenied,
            format!("the option \"{name}\" names an endpoint that is not allowed"),
        )
        .with_hint("A superuser allows endpoints (scheme, host and port) in hudi.allowed_endpoints.")),
    }
}

/// How requests that fail with a server error (5xx, 429) or a timeout are retried: with
/// exponential backoff, at most `max_retries` times and not after `retry_timeout` from the
/// first attempt. Timeouts of requests that are not idempotent are retried only where the
/// engine can tell afterwards whether the first attempt took effect ([`super::Storage::put_if_absent`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RetrySettings {
    pub max_retries: usize,
    pub retry_timeout: Duration,
    /// How long one request may take (object_store's `timeout`); `None` keeps its default.
    pub request_timeout: Option<Duration>,
    /// How long connecting may take (object_store's `connect_timeout`).
    pub connect_timeout: Option<Duration>,
}

impl Default for RetrySettings {
    fn default() -> Self {
        // object_store's own defaults for the retries; its 30 s / 5 s for the timeouts.
        RetrySettings { max_retries: 10, retry_timeout: Duration::from_secs(180), request_timeout: None, connect_timeout: None }
    }
}

impl RetrySettings {
    fn retry_config(&self) -> RetryConfig {
        RetryConfig { max_retries: self.max_retries, retry_timeout: self.retry_timeout, ..Default::default() }
    }

    /// The timeouts as client options, unless `options` set them already.
    fn client_options(&self, options: &BTreeMap<String, String>) -> Vec<(String, String)> {
        let timeouts = [("timeout", self.request_timeout), ("connect_timeout", self.connect_timeout)];
        timeouts
            .into_iter()
            .filter_map(|(name, value)| Some((name.to_owned(), format!("{}ms", value?.as_millis()))))
            .filter(|(name, _)| !options.contains_key(name))
            .collect()
    }
}

/// What an option does to where credentials come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Names credentials of the user's own (a key, a token, a secret) or asks for none.
    OwnCredentials,
    /// Makes the store use the server's files, environment or metadata endpoints.
    ServerIdentity,
    /// Anything else (region, endpoint, client settings).
    Other,
}

fn role_of(scheme: Scheme, name: &str, value: &str) -> Role {
    let yes = || matches!(value.trim().to_ascii_lowercase().as_str(), "true" | "1" | "yes" | "on");
    match scheme {
        Scheme::S3 => match AmazonS3ConfigKey::from_str(name) {
            Ok(AmazonS3ConfigKey::AccessKeyId) => Role::OwnCredentials,
            Ok(AmazonS3ConfigKey::SkipSignature) if yes() => Role::OwnCredentials,
            Ok(
                AmazonS3ConfigKey::MetadataEndpoint
                | AmazonS3ConfigKey::ImdsV1Fallback
                | AmazonS3ConfigKey::ContainerCredentialsRelativeUri
                | AmazonS3ConfigKey::ContainerCredentialsFullUri
                | AmazonS3ConfigKey::ContainerAuthorizationTokenFile
                | AmazonS3ConfigKey::WebIdentityTokenFile
                | AmazonS3ConfigKey::RoleArn
                | AmazonS3ConfigKey::RoleSessionName
                | AmazonS3ConfigKey::StsEndpoint,
            ) => Role::ServerIdentity,
            _ => Role::Other,
        },
        // A client secret counts only with its client and tenant ([`check_credentials`]);
        // alone, or a fabric token without its companions, object_store falls back to the
        // server's managed identity.
        Scheme::Azure => match AzureConfigKey::from_str(name) {
            Ok(AzureConfigKey::AccessKey | AzureConfigKey::SasKey | AzureConfigKey::Token) => Role::OwnCredentials,
            Ok(AzureConfigKey::UseEmulator | AzureConfigKey::SkipSignature) if yes() => Role::OwnCredentials,
            Ok(
                AzureConfigKey::MsiEndpoint
                | AzureConfigKey::ObjectId
                | AzureConfigKey::MsiResourceId
                | AzureConfigKey::FederatedTokenFile
                | AzureConfigKey::UseAzureCli,
            ) => Role::ServerIdentity,
            _ => Role::Other,
        },
        Scheme::Gcs => match GoogleConfigKey::from_str(name) {
            Ok(GoogleConfigKey::ServiceAccountKey) => Role::OwnCredentials,
            Ok(GoogleConfigKey::SkipSignature) if yes() => Role::OwnCredentials,
            Ok(GoogleConfigKey::ServiceAccount | GoogleConfigKey::ApplicationCredentials) => Role::ServerIdentity,
            _ => Role::Other,
        },
        Scheme::File | Scheme::Memory => Role::Other,
    }
}

/// Whether option `name` makes a store of `scheme` act as the server (read its files, its
/// environment or its metadata endpoints): such options are for superusers only.
pub fn takes_server_identity(scheme: Scheme, name: &str) -> bool {
    role_of(scheme, &name.to_ascii_lowercase(), "") == Role::ServerIdentity
}

/// What to tell a user whose options name no credentials.
fn how_to_give_credentials(scheme: Scheme) -> &'static str {
    match scheme {
        Scheme::S3 => "aws_access_key_id and aws_secret_access_key (or aws_skip_signature 'true' for a public bucket)",
        Scheme::Azure => "azure_storage_account_key, azure_storage_sas_key or azure_storage_token",
        Scheme::Gcs => "google_service_account_key (or google_skip_signature 'true' for a public bucket)",
        Scheme::File | Scheme::Memory => "nothing",
    }
}

/// Checks that `settings` say where credentials for `uri` come from without borrowing the
/// server's identity, unless the credential chain is allowed. Secrets are never part of the
/// message.
fn check_credentials(uri: &StorageUri, settings: &StoreSettings) -> Result<()> {
    if settings.credential_chain {
        return Ok(());
    }
    let names: Vec<String> = settings.options.keys().map(|name| name.to_ascii_lowercase()).collect();
    let roles: Vec<(&String, Role)> =
        names.iter().zip(settings.options.values()).map(|(name, value)| (name, role_of(uri.scheme(), name, value))).collect();
    let has = |key: AzureConfigKey| names.iter().any(|n| AzureConfigKey::from_str(n).is_ok_and(|k| k == key));
    let service_principal = uri.scheme() == Scheme::Azure
        && has(AzureConfigKey::ClientSecret)
        && has(AzureConfigKey::ClientId)
        && has(AzureConfigKey::AuthorityId);
    if let Some((name, _)) = roles.iter().find(|(_, role)| *role == Role::ServerIdentity) {
        return Err(Error::new(
            ErrorKind::PermissionDenied,
            format!("the option \"{name}\" takes credentials of the database server's own identity, which {uri} may not use"),
        )
        .with_hint("A superuser may allow the server's credential chain with the server option credential_chain 'true'."));
    }
    if !service_principal && !roles.iter().any(|(_, role)| *role == Role::OwnCredentials) {
        return Err(Error::new(ErrorKind::PermissionDenied, format!("no credentials for {uri}")).with_hint(format!(
            "Give {} in a USER MAPPING, or ask a superuser to allow the server's credential chain (server option credential_chain 'true').",
            how_to_give_credentials(uri.scheme())
        )));
    }
    Ok(())
}

/// `options` as the configuration keys of one store's builder.
fn config_keys<'o, K: FromStr<Err = object_store::Error>>(options: &'o [(String, String)], uri: &StorageUri) -> Result<Vec<(K, &'o str)>> {
    options
        .iter()
        .map(|(name, value)| {
            let key = K::from_str(name).map_err(|e| {
                Error::new(ErrorKind::InvalidArgument, format!("invalid option \"{name}\" for {uri}")).with_source(e)
            })?;
            Ok((key, value.as_str()))
        })
        .collect()
}

/// The object store of a cloud location (`s3://`, `az://`, `gs://`), its path the whole of
/// the URI's. Opening does no I/O.
pub(super) fn cloud_store(uri: &StorageUri, settings: &StoreSettings) -> Result<Arc<dyn ObjectStore>> {
    check_credentials(uri, settings)?;
    let options: Vec<(String, String)> = settings
        .options
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
        .chain(settings.retry.client_options(&settings.options))
        .collect();
    let retry = settings.retry.retry_config();
    let url = uri.as_str();
    let built = match uri.scheme() {
        Scheme::S3 => {
            let base = if settings.credential_chain { AmazonS3Builder::from_env() } else { AmazonS3Builder::new() };
            let configured = config_keys(&options, uri)?.into_iter().fold(base, |b, (k, v)| b.with_config(k, v));
            configured.with_url(url).with_retry(retry).build().map(|s| Arc::new(s) as Arc<dyn ObjectStore>)
        }
        Scheme::Azure => {
            let base = if settings.credential_chain { MicrosoftAzureBuilder::from_env() } else { MicrosoftAzureBuilder::new() };
            let configured = config_keys(&options, uri)?.into_iter().fold(base, |b, (k, v)| b.with_config(k, v));
            configured.with_url(url).with_retry(retry).build().map(|s| Arc::new(s) as Arc<dyn ObjectStore>)
        }
        Scheme::Gcs => {
            let base =
                if settings.credential_chain { GoogleCloudStorageBuilder::from_env() } else { GoogleCloudStorageBuilder::new() };
            let configured = config_keys(&options, uri)?.into_iter().fold(base, |b, (k, v)| b.with_config(k, v));
            configured.with_url(url).with_retry(retry).build().map(|s| Arc::new(s) as Arc<dyn ObjectStore>)
        }
        Scheme::File | Scheme::Memory => {
            return Err(Error::new(ErrorKind::Internal, format!("{uri} is not a cloud location")));
        }
    };
    // object_store's build errors name options, never their values.
    built.map_err(|e| Error::new(ErrorKind::InvalidArgument, format!("cannot open {uri}")).with_source(e))
}

/// Whether `name` is a client option every store takes (`timeout`, `proxy_url`, ...).
pub(super) fn is_client_option(name: &str) -> bool {
    ClientConfigKey::from_str(name).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_allowed_by_scheme_host_and_port() {
        let allowed = vec!["http://127.0.0.1:9000".to_owned(), "https://s3.example.com".to_owned()];
        assert!(endpoint_allowed("http://127.0.0.1:9000/bucket", &allowed));
        assert!(endpoint_allowed("https://S3.example.com:443", &allowed));
        assert!(!endpoint_allowed("http://127.0.0.1:9001", &allowed));
        assert!(!endpoint_allowed("https://127.0.0.1:9000", &allowed));
        assert!(!endpoint_allowed("http://169.254.169.254/latest", &allowed));
        assert!(!endpoint_allowed("not a url", &allowed));
        let options = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>();
        let named = options(&[("aws_endpoint", "http://10.0.0.1"), ("AWS_ACCESS_KEY_ID", "k"), ("proxy_url", "http://p:3128"),
            ("azure_storage_use_emulator", "true"), ("endpoint_url", "http://e")]);
        let names: Vec<String> = endpoints_named(&named).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["aws_endpoint", "azure_storage_use_emulator", "endpoint_url", "proxy_url"]);
        assert!(check_endpoints(&named, None).is_ok());
        let refused = check_endpoints(&named, Some(&allowed)).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::PermissionDenied);
        assert!(!refused.to_string().contains("10.0.0.1"), "{refused}");
        let fine = options(&[("aws_endpoint", "http://127.0.0.1:9000")]);
        assert!(check_endpoints(&fine, Some(&allowed)).is_ok());
        // A GCS service account key names its endpoint inside its JSON.
        let key = |json: &str| options(&[("google_service_account_key", json)]);
        let emulator = key(r#"{"gcs_base_url": "http://127.0.0.1:9000", "disable_oauth": true, "client_email": "", "private_key": ""}"#);
        assert!(check_endpoints(&emulator, Some(&allowed)).is_ok());
        for elsewhere in [
            r#"{"gcs_base_url": "http://169.254.169.254", "disable_oauth": true}"#,
            r#"{"gcs_base_url": 7}"#,
            r#"{"gcs_base_url": "http://169.254.169.254", "#,
        ] {
            assert_eq!(check_endpoints(&key(elsewhere), Some(&allowed)).unwrap_err().kind(), ErrorKind::PermissionDenied, "{elsewhere}");
        }
        assert!(check_endpoints(&key(r#"{"private_key": "-----BEGIN", "client_email": "a@b"}"#), Some(&allowed)).is_ok());
        assert!(check_endpoints(&key("not json"), Some(&allowed)).is_ok());
    }

    fn settings(options: &[(&str, &str)]) -> StoreSettings {
        StoreSettings {
            options: options.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_store_needs_credentials_of_its_own_unless_the_chain_is_allowed() {
        let uri = StorageUri::parse("s3://lake/t").unwrap();
        let none = cloud_store(&uri, &settings(&[("aws_region", "eu-west-1")])).unwrap_err();
        assert_eq!(none.kind(), ErrorKind::PermissionDenied);
        assert!(none.to_string().contains("no credentials for s3://lake/t"), "{none}");
        let chain = StoreSettings { credential_chain: true, ..settings(&[("aws_region", "eu-west-1")]) };
        cloud_store(&uri, &chain).unwrap();
        cloud_store(&uri, &settings(&[("aws_access_key_id", "k"), ("aws_secret_access_key", "s")])).unwrap();
        cloud_store(&uri, &settings(&[("aws_skip_signature", "true")])).unwrap();
        assert!(cloud_store(&uri, &settings(&[("aws_skip_signature", "false")])).is_err());
    }

    #[test]
    fn options_that_borrow_the_servers_identity_need_the_chain() {
        let cases = [
            ("s3://lake/t", "aws_container_credentials_relative_uri", "/v2/credentials"),
            ("s3://lake/t", "aws_web_identity_token_file", "/var/run/token"),
            ("s3://lake/t", "aws_metadata_endpoint", "http://169.254.169.254"),
            ("az://lake/t", "azure_federated_token_file", "/var/run/token"),
            ("az://lake/t", "azure_use_azure_cli", "true"),
            ("gs://lake/t", "google_service_account", "/etc/key.json"),
            ("gs://lake/t", "google_application_credentials", "/etc/key.json"),
        ];
        for (uri, name, value) in cases {
            let uri = StorageUri::parse(uri).unwrap();
            assert!(takes_server_identity(uri.scheme(), name), "{name}");
            let secret = ("aws_secret_access_key", "never-shown");
            let refused = cloud_store(&uri, &settings(&[(name, value), secret, ("aws_access_key_id", "k")])).unwrap_err();
            assert_eq!(refused.kind(), ErrorKind::PermissionDenied, "{name}");
            assert!(refused.to_string().contains(name) && !format!("{refused:?}").contains("never-shown"), "{refused:?}");
        }
        assert!(!takes_server_identity(Scheme::S3, "aws_access_key_id"));
        // A client secret without its client and tenant would sign as the server's identity.
        let az = StorageUri::parse("az://lake/t").unwrap();
        let account = ("azure_storage_account_name", "a");
        assert!(cloud_store(&az, &settings(&[account, ("azure_client_secret", "s")])).is_err());
        assert!(cloud_store(&az, &settings(&[account, ("azure_fabric_session_token", "s")])).is_err());
        let principal = [account, ("azure_client_secret", "s"), ("azure_client_id", "c"), ("azure_tenant_id", "t")];
        cloud_store(&az, &settings(&principal)).unwrap();
        assert!(!takes_server_identity(Scheme::Azure, "azure_storage_account_key"));
    }

    #[test]
    fn timeouts_of_the_server_yield_to_the_users_own() {
        let retry = RetrySettings { request_timeout: Some(Duration::from_millis(1500)), ..Default::default() };
        assert_eq!(retry.client_options(&BTreeMap::new()), [("timeout".to_owned(), "1500ms".to_owned())]);
        let own: BTreeMap<String, String> = [("timeout".to_owned(), "5s".to_owned())].into();
        assert!(retry.client_options(&own).is_empty());
    }
}

//! Errors of the engine: a kind that callers branch on (the extension maps it to a SQLSTATE),
//! a message for people, and the context it happened in (a file, a table, an option).

use std::fmt;

/// What went wrong, coarsely: enough for a caller to decide how to report or retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// A value supplied by the user (an option, a URI, an instant) is not acceptable.
    InvalidArgument,
    /// A table, file or instant that should exist does not.
    NotFound,
    /// Bytes on storage do not follow the Hudi format (bad checksum, truncated block, ...).
    Corrupt,
    /// Valid Hudi, but a feature or version this engine does not handle.
    Unsupported,
    /// The caller may not touch this location.
    PermissionDenied,
    /// The object store failed (I/O, network, credentials).
    Storage,
    /// Another writer is doing the same thing right now (e.g. executing the same compaction).
    InUse,
    /// A computed value does not fit its type (an aggregate's overflow).
    OutOfRange,
    /// An expression divided by zero.
    DivisionByZero,
    /// An invariant of the engine itself broke: a bug.
    Internal,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            ErrorKind::InvalidArgument => "invalid argument",
            ErrorKind::NotFound => "not found",
            ErrorKind::Corrupt => "corrupt data",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::PermissionDenied => "permission denied",
            ErrorKind::Storage => "storage error",
            ErrorKind::InUse => "in use",
            ErrorKind::OutOfRange => "out of range",
            ErrorKind::DivisionByZero => "division by zero",
            ErrorKind::Internal => "internal error",
        };
        f.write_str(name)
    }
}

/// An engine error: kind, message, and the chain of contexts it passed through (innermost first).
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    context: Vec<String>,
    hint: Option<String>,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

/// Result with the engine's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A new error of `kind` with a message for people.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error { kind, message: message.into(), context: Vec::new(), hint: None, source: None }
    }

    /// Attaches the lower-level error that caused this one.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// Adds where it happened, e.g. `"reading file:///lake/t/.hoodie/hoodie.properties"`.
    pub fn context(mut self, context: impl Into<String>) -> Self {
        self.context.push(context.into());
        self
    }

    /// Adds what the user can do about it.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// What the user can do about it, if the error knows.
    pub fn hint(&self) -> Option<&str> {
        self.hint.as_deref()
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// Contexts, innermost first.
    pub fn contexts(&self) -> &[String] {
        &self.context
    }

    /// The message with the cause appended, without contexts: what a user reads first.
    pub fn detail(&self) -> String {
        match &self.source {
            Some(source) => format!("{}: {}", self.message, source),
            None => self.message.clone(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.detail())?;
        for context in self.context.iter().rev() {
            write!(f, " (while {context})")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|s| s as &(dyn std::error::Error + 'static))
    }
}

impl From<object_store::Error> for Error {
    fn from(err: object_store::Error) -> Self {
        let kind = match &err {
            object_store::Error::NotFound { .. } => ErrorKind::NotFound,
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => ErrorKind::PermissionDenied,
            object_store::Error::NotSupported { .. } | object_store::Error::NotImplemented => {
                ErrorKind::Unsupported
            }
            _ => ErrorKind::Storage,
        };
        let message = match kind {
            ErrorKind::NotFound => "object not found",
            ErrorKind::PermissionDenied => "access to object store denied",
            _ => "object store request failed",
        };
        Error::new(kind, message).with_source(StoreFailure(without_response_bodies(&err.to_string())))
    }
}

thread_local! {
    /// How many [`corrupt_on_panic`] calls this thread is inside.
    static CATCHING: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Whether a panic on this thread now is one the engine catches and reports as damaged input
/// ([`corrupt_on_panic`]): a host's panic hook need not log it as a bug.
pub fn panic_is_caught() -> bool {
    CATCHING.with(|c| c.get() > 0)
}

/// Runs `decode`, a decoder of another crate at work on bytes from storage. If it panics (on
/// damaged input it trusted), that is a Corrupt error saying `what` and the panic's message,
/// not a failed reader. (The process's panic hook still sees the panic.)
pub(crate) fn corrupt_on_panic<T>(what: &str, decode: impl FnOnce() -> Result<T>) -> Result<T> {
    CATCHING.with(|c| c.set(c.get() + 1));
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(decode));
    CATCHING.with(|c| c.set(c.get() - 1));
    caught.unwrap_or_else(|panic| {
        let message = panic.downcast_ref::<String>().map(String::as_str).or_else(|| panic.downcast_ref::<&str>().copied());
        Err(Error::new(ErrorKind::Corrupt, format!("{what}: {}", message.unwrap_or("its decoder failed"))))
    })
}

/// What a store's request came to, as text without what the store answered.
#[derive(Debug)]
struct StoreFailure(String);

impl fmt::Display for StoreFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StoreFailure {}

/// `text` (object_store's description of a failed request) without the response body it may
/// quote: an endpoint can answer anything (a role that points a store at an internal address
/// would read that address's pages in the error), and a real store's body says nothing the
/// status does not.
fn without_response_bodies(text: &str) -> String {
    const STATUS: &str = "status code: ";
    const RESPONSE: &str = "error response: ";
    if let Some(at) = text.find(STATUS) {
        let rest = &text[at + STATUS.len()..];
        // "<code> <reason>: <body>": the status, up to the body.
        let status = rest.split_once(": ").map_or(rest, |(status, _)| status);
        return format!("{}{STATUS}{status}", &text[..at]);
    }
    if let Some(at) = text.find(RESPONSE) {
        return format!("{}error response", &text[..at]);
    }
    text.to_owned()
}

/// Adds context to the error of a `Result` without disturbing the success path.
pub trait ResultExt<T> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: Into<Error>> ResultExt<T> for std::result::Result<T, E> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| e.into().context(context()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store that answers with a body (an internal page an endpoint could be pointed at): the
    /// error tells the status, not the body.
    #[tokio::test]
    async fn store_errors_do_not_quote_what_the_store_answered() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for stream in listener.incoming().take(20) {
                let Ok(mut stream) = stream else { continue };
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request);
                let body = "<html>internal-secret-page</html>";
                let _ = write!(stream, "HTTP/1.1 403 Forbidden\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
            }
        });
        let uri = crate::storage::StorageUri::parse("s3://bucket/t").unwrap();
        let options = [
            ("aws_endpoint", format!("http://127.0.0.1:{port}")),
            ("aws_allow_http", "true".to_owned()),
            ("aws_access_key_id", "k".to_owned()),
            ("aws_secret_access_key", "s".to_owned()),
            ("aws_region", "us-east-1".to_owned()),
        ];
        let settings = crate::storage::StoreSettings {
            options: options.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
            ..Default::default()
        };
        let storage = crate::storage::Storage::open(&uri, &settings).unwrap();
        let err = storage.get("x").await.unwrap_err().to_string();
        assert!(err.contains("403"), "{err}");
        assert!(!err.contains("internal-secret-page"), "{err}");
        assert_eq!(without_response_bodies("a: status code: 500 Internal Server Error: <body/>"), "a: status code: 500 Internal Server Error");
        assert_eq!(without_response_bodies("Server returned error response: <x/>"), "Server returned error response");
    }

    #[test]
    fn display_shows_cause_and_contexts_outermost_first() {
        let io = std::io::Error::other("disk on fire");
        let err = Error::new(ErrorKind::Storage, "cannot read")
            .with_source(io)
            .context("reading hoodie.properties")
            .context("loading table t");
        assert_eq!(err.kind(), ErrorKind::Storage);
        assert_eq!(
            err.to_string(),
            "cannot read: disk on fire (while loading table t) (while reading hoodie.properties)"
        );
    }

    #[test]
    fn object_store_not_found_maps_to_not_found() {
        let err: Error = object_store::Error::NotFound {
            path: "x".into(),
            source: "gone".into(),
        }
        .into();
        assert_eq!(err.kind(), ErrorKind::NotFound);
    }
}

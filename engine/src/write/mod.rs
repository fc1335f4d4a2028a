//! Writing tables: creating them, and the commit protocol of writers (bucketed log files under
//! non-blocking concurrency control).

pub mod commit;
pub mod heartbeat;
pub mod schema;
pub mod time;
pub mod table;
pub mod transaction;

pub use table::{create_table, NewTable};
pub use transaction::{KeyToDelete, Transaction, WriterId};

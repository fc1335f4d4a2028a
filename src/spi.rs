//! Reading through SPI without giving the transaction an xid: pgrx's `Spi::get_one`,
//! `Spi::run` and `SpiClient::update` assign one to mark the transaction as writing, so a
//! background worker's transaction that only read would still write a commit record (which,
//! polled every 100 ms, WAL decoding then reads back), and PostgreSQL refuses to make a
//! replication slot in a transaction with an xid.

use pgrx::datum::{DatumWithOid, FromDatum, IntoDatum};
use pgrx::prelude::*;

/// The first column of the first row of the read-only query `sql`, or `None` (no row, NULL).
pub(crate) fn read_one<T: FromDatum + IntoDatum>(sql: &str, args: &[DatumWithOid]) -> Result<Option<T>, pgrx::spi::SpiError> {
    Spi::connect(|client| client.select(sql, Some(1), args)?.first().get_one::<T>())
}

/// Whether the read-only query `sql` (`SELECT EXISTS (...)`) says so; an SPI failure is an
/// ERROR, not a no.
pub(crate) fn exists(sql: &str, args: &[DatumWithOid]) -> bool {
    read_one::<bool>(sql, args).unwrap_or_else(|e| crate::error::spi_failed("a catalog check", e)).unwrap_or(false)
}

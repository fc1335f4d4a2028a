//! Where a foreign table's Hudi table lives and how to open it: server `base_uri` + table
//! `path`, credentials from the current user's mapping, and the table's read options.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::rc::Rc;
use std::sync::Arc;

use engine::read::TableReader;
use engine::storage::{Scheme, Storage, StorageUri, StoreSettings};
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::error::OrReport;
use crate::fdw::options::check_location_access;

/// `DefElem` options of a catalog list as name → value.
///
/// # Safety
/// `list` must be a valid `List` of `DefElem` nodes (or null).
pub unsafe fn options_of(list: *mut pg_sys::List) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if list.is_null() {
        return out;
    }
    for i in 0..(*list).length {
        let def = (*(*list).elements.offset(i as isize)).ptr_value as *mut pg_sys::DefElem;
        let name = CStr::from_ptr((*def).defname).to_string_lossy().into_owned();
        let value = CStr::from_ptr(pg_sys::defGetString(def)).to_string_lossy().into_owned();
        out.insert(name, value);
    }
    out
}

/// A foreign table resolved to its storage location and options.
#[derive(Debug, Clone)]
pub struct ForeignHudiTable {
    pub uri: StorageUri,
    /// How its store is reached: the current role's credentials and the server's settings.
    pub store: StoreSettings,
    /// The table's own options (`query_type`, `as_of_instant`, ...).
    pub options: Arc<BTreeMap<String, String>>,
}

/// What the catalog declares of a foreign table: its server, its options and the server's
/// `base_uri`, read once per backend and kept until the catalog changes ([`Declared::of`]).
struct Declared {
    server: pg_sys::Oid,
    options: Arc<BTreeMap<String, String>>,
    base_uri: String,
    /// Where it points, and when that was resolved ([`resolved_location`]).
    resolved: std::cell::RefCell<Option<(std::time::Instant, StorageUri)>>,
}

thread_local! {
    /// Declarations by relation, and store settings by (role, server): every statement on a
    /// foreign table opens it, and reading the options from the catalog (GetForeignTable and
    /// GetForeignServer copy them, and each was parsed into a map) was a tenth of a one-row
    /// buffered INSERT's CPU. Emptied when a foreign table, server or user mapping changes.
    static DECLARED: std::cell::RefCell<std::collections::HashMap<u32, Rc<Declared>>> = Default::default();
    static STORE_SETTINGS: std::cell::RefCell<std::collections::HashMap<(u32, u32), StoreSettings>> = Default::default();
    static INVALIDATION_CALLBACKS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Forgets every kept declaration and store setting (a syscache invalidation callback).
#[pg_guard]
unsafe extern "C-unwind" fn forget_declarations(_arg: pg_sys::Datum, _cache: i32, _hash: u32) {
    DECLARED.with(|d| d.borrow_mut().clear());
    STORE_SETTINGS.with(|s| s.borrow_mut().clear());
}

/// Registers [`forget_declarations`] for the catalogs the kept values come from, once.
fn register_invalidation_callbacks() {
    if INVALIDATION_CALLBACKS.with(|r| r.replace(true)) {
        return;
    }
    use pg_sys::SysCacheIdentifier::*;
    for cache in [FOREIGNTABLEREL, FOREIGNSERVEROID, USERMAPPINGOID, USERMAPPINGUSERSERVER] {
        // SAFETY: registering a callback for the rest of the backend's life, on the main thread.
        unsafe { pg_sys::CacheRegisterSyscacheCallback(cache as i32, Some(forget_declarations), pg_sys::Datum::from(0usize)) };
    }
}

impl Declared {
    /// The declaration of the foreign table `relid`, kept or read.
    ///
    /// # Safety
    /// `relid` must be a foreign table; on the main thread inside a transaction.
    unsafe fn of(relid: pg_sys::Oid) -> Rc<Declared> {
        register_invalidation_callbacks();
        if let Some(kept) = DECLARED.with(|d| d.borrow().get(&relid.to_u32()).cloned()) {
            return kept;
        }
        let table = pg_sys::GetForeignTable(relid);
        let server = pg_sys::GetForeignServer((*table).serverid);
        let declared = Rc::new(Declared {
            server: (*table).serverid,
            options: Arc::new(options_of((*table).options)),
            base_uri: options_of((*server).options).remove("base_uri").unwrap_or_default(),
            resolved: Default::default(),
        });
        DECLARED.with(|d| {
            let mut kept = d.borrow_mut();
            if kept.len() >= 1024 {
                kept.clear();
            }
            kept.insert(relid.to_u32(), declared.clone());
        });
        declared
    }
}

/// How `role` reaches the store of `uri` through `server`: the options of its user mapping
/// (or the PUBLIC mapping's, or none), with the server's retry settings and whether it
/// allows the credential chain. Local locations take none of it.
pub unsafe fn store_settings(role: pg_sys::Oid, server: pg_sys::Oid, uri: &StorageUri) -> StoreSettings {
    // Every store opens through here: the files it creates get the server's mode.
    engine::storage::local::set_creation_mode(crate::guc::file_mode());
    if matches!(uri.scheme(), Scheme::File | Scheme::Memory) {
        return StoreSettings::default();
    }
    register_invalidation_callbacks();
    let key = (role.to_u32(), server.to_u32());
    if let Some(kept) = STORE_SETTINGS.with(|s| s.borrow().get(&key).cloned()) {
        return kept;
    }
    let server_options = options_of((*pg_sys::GetForeignServer(server)).options);
    let options = PgTryBuilder::new(|| options_of((*pg_sys::GetUserMapping(role, server)).options))
        .catch_others(|_| BTreeMap::new())
        .execute();
    let settings = crate::fdw::options::store_settings(&server_options, options);
    STORE_SETTINGS.with(|s| {
        let mut kept = s.borrow_mut();
        if kept.len() >= 1024 {
            kept.clear();
        }
        kept.insert(key, settings.clone());
    });
    settings
}

/// The name of relation `relid`, or its number when it has none (dropped).
pub fn relation_name(relid: pg_sys::Oid) -> String {
    // SAFETY: a catalog lookup on the main thread inside a transaction; the name is a
    // NUL-terminated string palloc'd by get_rel_name.
    unsafe {
        let name = pg_sys::get_rel_name(relid);
        if name.is_null() { relid.to_u32().to_string() } else { CStr::from_ptr(name).to_string_lossy().into_owned() }
    }
}

/// Where the foreign table `relid` points: its server's `base_uri` with its `path` resolved
/// below it (a path that leaves the base is an error), without the access checks of
/// [`ForeignHudiTable::of_relation`].
///
/// # Safety
/// `relid` must be a foreign table.
unsafe fn location_of(relid: pg_sys::Oid) -> engine::Result<StorageUri> {
    resolved_location(&Declared::of(relid))
}

/// Where `declared` points (see [`location_of`]), resolved at most [`RESOLVED_FOR`] ago:
/// resolving a `file://` location asks the file system where its symlinks lead (so that none
/// leads out of the base), about a fifth of what a statement of a one-row buffered INSERT cost
/// besides PostgreSQL's own work; a symlink changed since is seen a second later at most.
fn resolved_location(declared: &Declared) -> engine::Result<StorageUri> {
    if let Some((at, uri)) = &*declared.resolved.borrow() {
        if at.elapsed() < RESOLVED_FOR {
            return Ok(uri.clone());
        }
    }
    let path = declared.options.get("path").map(String::as_str).unwrap_or_default();
    let uri = StorageUri::parse(&declared.base_uri)?.resolve(path)?;
    *declared.resolved.borrow_mut() = Some((std::time::Instant::now(), uri.clone()));
    Ok(uri)
}

/// How long a resolved location is used again without resolving it anew.
const RESOLVED_FOR: std::time::Duration = std::time::Duration::from_secs(1);

/// [`location_of`] for any relation: `None` for one that is gone, is not a foreign table, or
/// whose location does not resolve. Only to compare with a location already checked.
pub fn foreign_table_location(relid: pg_sys::Oid) -> Option<StorageUri> {
    // SAFETY: catalog lookups on the main thread; other relations are refused first.
    unsafe {
        let foreign = !pg_sys::get_rel_name(relid).is_null()
            && pg_sys::get_rel_relkind(relid) == pg_sys::RELKIND_FOREIGN_TABLE as std::ffi::c_char;
        if foreign { location_of(relid).ok() } else { None }
    }
}

/// Whether `relid` is a foreign table of the `hudi_fdw` wrapper (false for any other relation,
/// and for one that does not exist).
pub fn is_hudi_table(relid: pg_sys::Oid) -> bool {
    // SAFETY: catalog lookups on the main thread; other relations are refused first.
    unsafe {
        pg_sys::get_rel_relkind(relid) == pg_sys::RELKIND_FOREIGN_TABLE as std::ffi::c_char && {
            let table = pg_sys::GetForeignTable(relid);
            let server = pg_sys::GetForeignServer((*table).serverid);
            let wrapper = pg_sys::GetForeignDataWrapper((*server).fdwid);
            CStr::from_ptr((*wrapper).fdwname).to_bytes() == b"hudi_fdw"
        }
    }
}

impl ForeignHudiTable {
    /// The table option `name` as a count (the validator accepted only positive integers), or
    /// `default` when it is not set.
    pub fn count_option(&self, name: &str, default: usize) -> usize {
        self.options.get(name).and_then(|v| v.trim().parse().ok()).unwrap_or(default)
    }

    /// Resolves `relid` for a SQL function: it must be a `hudi_fdw` foreign table the user may
    /// read.
    pub fn for_function(relid: pg_sys::Oid) -> ForeignHudiTable {
        // SAFETY: catalog lookups on the main thread.
        unsafe {
            let name = relation_name(relid);
            if !is_hudi_table(relid) {
                crate::error::raise(
                    pgrx::PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE,
                    format!("\"{name}\" is not a hudi_fdw foreign table"),
                    None,
                );
            }
            if pg_sys::pg_class_aclcheck(relid, pg_sys::GetUserId(), pg_sys::ACL_SELECT as pg_sys::AclMode)
                != pg_sys::AclResult::ACLCHECK_OK
            {
                crate::error::raise(
                    pgrx::PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
                    format!("permission denied for foreign table {name}"),
                    None,
                );
            }
        }
        Self::of_relation(relid)
    }

    /// Resolves the foreign table `relid` (server `base_uri` + table `path`) for the current
    /// role: the location must lie below the server's `base_uri` and be one the role may use
    /// ([`check_location_access`]). Every read, write and function opens tables through here,
    /// so a server or table whose options changed since they were validated is checked again.
    pub fn of_relation(relid: pg_sys::Oid) -> ForeignHudiTable {
        // SAFETY: catalog lookups for an existing foreign table, on the main thread.
        unsafe {
            let declared = Declared::of(relid);
            let uri = resolved_location(&declared).or_report();
            check_location_access(&uri);
            let store = store_settings(pg_sys::GetUserId(), declared.server, &uri);
            ForeignHudiTable { uri, store, options: declared.options.clone() }
        }
    }

    pub fn storage(&self) -> Storage {
        Storage::open(&self.uri, &self.store).or_report()
    }

    /// The table for reading: its state from this backend's cache when it is still the
    /// table's ([`crate::fdw::table_state`]), else loaded.
    pub fn open_reader(&self) -> TableReader {
        crate::fdw::table_state::reader(self, &[])
    }

    /// The table loaded from storage now (config, timeline, file listing and schema),
    /// bypassing the cache.
    pub fn load_reader(&self) -> TableReader {
        crate::runtime::block_on(TableReader::open(self.storage())).or_report()
    }

    /// The table's configuration and its schema (Avro) as its latest commit records it, read
    /// now: what a write writes with and a schema change starts from (one listing of the
    /// timeline and one read of a commit, no file listing).
    pub fn config_and_schema(&self, storage: &Storage) -> (engine::table::TableConfig, String) {
        let config = crate::runtime::block_on(engine::table::load_config(storage)).or_report();
        let schema = crate::runtime::block_on(engine::timeline::metadata::latest_table_schema(storage, &config)).or_report();
        (config, schema)
    }

    /// The option that makes this declaration read-only, with its value: `query_type` other
    /// than `snapshot`, or `as_of_instant`. Such a declaration neither truncates nor changes
    /// the schema of its table.
    pub fn read_only_option(&self) -> Option<(&'static str, &str)> {
        [("query_type", "snapshot"), ("as_of_instant", "")]
            .into_iter()
            .find_map(|(option, default)| self.options.get(option).filter(|v| *v != default).map(|v| (option, v.as_str())))
    }
}

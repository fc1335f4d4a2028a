-- The foreign-data wrapper. Its handler is a plain C-ABI function (it returns the internal
-- fdw_handler pseudo-type); its validator is generated from Rust (fdw::options).
CREATE FUNCTION hudi.hudi_fdw_handler() RETURNS fdw_handler
    AS 'MODULE_PATHNAME', 'hudi_fdw_handler' LANGUAGE C STRICT;

CREATE FOREIGN DATA WRAPPER hudi_fdw
    HANDLER hudi.hudi_fdw_handler
    VALIDATOR hudi.hudi_fdw_validator;

COMMENT ON FOREIGN DATA WRAPPER hudi_fdw IS 'Apache Hudi tables on object storage';

-- Every role may call the hudi.* functions; each checks its own privileges (locations, tables).
GRANT USAGE ON SCHEMA hudi TO PUBLIC;

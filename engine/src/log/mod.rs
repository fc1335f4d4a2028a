//! Log files: block framing ([`block`]) and block contents ([`data`]).

pub mod block;
pub mod data;
pub mod positions;

pub use block::{read_blocks, BlockType, LogBlock};
pub use data::{decode_block, BlockContent, DeleteRecord};

//! The decision scripts as one Redis Function library (`FUNCTION LOAD` once per connection,
//! `FCALL` per decision): the only way sluice decides on Redis, on every link
//! ([`super::link`]), so Redis 7.0+ or Valkey 7.2+ is required.
//!
//! Why: a library's top level runs once, at load, where a script run by `EVAL` would build
//! its helpers and each algorithm's closures per decision; and the library's `batch` decides
//! every decision a thread queued in one scheduler tick in one `FCALL`, so Redis parses,
//! dispatches and answers one command for all of them. Functions only: one copy of the
//! scripts, one way to call them.
//!
//! The library is assembled from the algorithms' files (no second copy of any algorithm), at
//! one top level: `batch.lua`'s script (every algorithm's file, then the batch
//! policy) split at its `-- sluice:main` line into definitions and the per-call body (the
//! `decide` function); each lone entry point (`fixed_window`, ...) wrapped as a function of
//! `(KEYS, ARGV)`; `plain.lua` (plain takes' mend); `functions.lua` (`batch`) last. Its name
//! carries a hash (SHA-1) of its source, so sluice versions sharing one Redis each call their own
//! code, and loading is "load unless already there": never `REPLACE`. A connection that loads
//! it (it was not there) deletes the other `sluice_*` libraries, so builds do not pile up in
//! Redis; an older sluice still running meanwhile finds its function gone, reconnects and
//! loads it again.

use std::sync::LazyLock;

use super::script::{self, ScriptId};

/// The batch function's source (see its header).
const BATCH_LUA: &str = include_str!("lua/functions.lua");

/// Plain takes' mend (`plain.rs`), library only.
const PLAIN_LUA: &str = include_str!("lua/plain.lua");

/// The library: its source for `FUNCTION LOAD`, and the names to `FCALL`.
pub struct Library {
    /// `sluice_<hash of the source>`.
    pub name: String,
    pub source: String,
    /// Indexed by [`ScriptId::code`] - 1.
    functions: Vec<String>,
    batch: String,
    mend: String,
}

impl Library {
    /// The function that runs `id`'s script.
    pub fn function(&self, id: ScriptId) -> &str {
        &self.functions[usize::from(id.code()) - 1]
    }

    /// The function that runs a batch of decisions.
    pub fn batch(&self) -> &str {
        &self.batch
    }

    /// The function that decides a plain take again (`plain.lua`).
    pub fn mend(&self) -> &str {
        &self.mend
    }
}

pub static LIBRARY: LazyLock<Library> = LazyLock::new(build);

fn build() -> Library {
    let (defs, main) = script::LUA
        .split_once("-- sluice:main")
        .expect("batch.lua has its -- sluice:main line");
    let mut body = String::with_capacity(script::LUA.len() * 2);
    body.push_str(defs);
    body.push_str("\nlocal function decide(KEYS, ARGV)\n-- sluice:main");
    body.push_str(main);
    body.push_str("\nend\n");
    // Each lone entry point is defined above (its algorithm's file); called alone, it runs as
    // its script does (`script::fast_main`). The library's `batch` calls it itself with
    // positional values.
    for id in ScriptId::ALL {
        if id.argc().is_some() {
            let name = id.name();
            let main = script::fast_main(name);
            body.push_str(&format!(
                "\nlocal function {name}_call(KEYS, ARGV)\n{main}end\n"
            ));
        }
    }
    body.push_str(PLAIN_LUA);
    let table = |f: &dyn Fn(ScriptId) -> Option<String>| {
        let entries: Vec<String> = ScriptId::ALL
            .iter()
            .filter_map(|&id| f(id).map(|v| format!("['{}'] = {v}", id.code())))
            .collect();
        format!("{{ {} }}", entries.join(", "))
    };
    let tables = format!(
        "local FAST = {}\nlocal AGAIN = {}\nlocal ARGC = {}\nlocal WHOLE = {}\nlocal NOW_AT = {}\nlocal SHORT = {}\n",
        table(&|id| id.argc().map(|_| id.name().to_string())),
        table(&|id| id.repeats().then(|| format!("{}_again", id.name()))),
        table(&|id| id.argc().map(|n| n.to_string())),
        table(&|id| id.argc().is_none().then(|| id.name().to_string())),
        table(&|id| id.argc().is_none().then(|| id.now_at().to_string())),
        // batch.lua's short layout, decided in place in the batch's own tables.
        table(&|id| (id == ScriptId::Decide).then(|| "take_short".to_string())),
    );
    body.push('\n');
    body.push_str(&BATCH_LUA.replacen("-- sluice:tables", &tables, 1));
    let hash = crate::store::redis::resp::sha1_hex(&body);
    let name = format!("sluice_{}", &hash[..12]);
    let functions: Vec<String> = ScriptId::ALL
        .iter()
        .map(|id| format!("{name}_{}", id.name()))
        .collect();
    let batch = format!("{name}_batch");
    let mut source = format!("#!lua name={name}\n{body}\n");
    for (id, f) in ScriptId::ALL.iter().zip(&functions) {
        let entry = if id.argc().is_some() {
            format!("{}_call", id.name())
        } else {
            id.name().to_string()
        };
        source.push_str(&format!("redis.register_function('{f}', {entry})\n"));
    }
    source.push_str(&format!("redis.register_function('{batch}', batch)\n"));
    let mend = format!("{name}_fixed_window_mend");
    source.push_str(&format!(
        "redis.register_function('{mend}', fixed_window_mend)\n"
    ));
    Library {
        name,
        source,
        functions,
        batch,
        mend,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_is_a_function_of_the_library_named_for_its_source() {
        let lib = &*LIBRARY;
        assert!(lib.source.starts_with("#!lua name=sluice_"));
        for id in ScriptId::ALL {
            let f = lib.function(id);
            assert!(f.ends_with(id.name()), "{f}");
            assert!(lib
                .source
                .contains(&format!("redis.register_function('{f}'")));
        }
        assert!(lib.source.contains(&format!(
            "redis.register_function('{}', batch)",
            lib.batch()
        )));
        // batch.lua's per-call body is inside `decide`, its definitions outside.
        let at_main = lib
            .source
            .find("local function decide(KEYS, ARGV)")
            .unwrap();
        assert!(lib.source.find("local function fdiv").unwrap() < at_main);
        assert!(lib.source.find("local A = ARGV").unwrap() > at_main);
    }
}

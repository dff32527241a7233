// SPDX-License-Identifier: GPL-2.0
//! Names for code addresses: the site table (what each stub call stands for)
//! and the symbols of the modules' `.ko` files.
//!
//! A stub's return address maps exactly to an instruction of the original
//! module (section and offset), which the `.ko`'s STT_FUNC symbols name. The
//! runtime's own events carry the caller's address in the loaded, rewritten
//! image instead, which has no exact map back: it is named by module and
//! image offset, and by function when the stub sites just before and just
//! after it lie in the same function (the rewriter keeps a function's code
//! together).

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;

use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
use serde_json::{json, Value};

use rustc_hash::FxHashMap;

use crate::region::Module;
use crate::trace::TraceSite;

/// A code address an event names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SiteRef {
    /// A stub call's return address: in the site table.
    Stub(u32),
    /// The runtime's caller, an address in a module's loaded image.
    Runtime(u32),
}

impl SiteRef {
    pub fn address(self) -> u32 {
        match self {
            SiteRef::Stub(a) | SiteRef::Runtime(a) => a,
        }
    }
}

/// The largest `.ko` read: a driver module is a few MiB at most, and the
/// path comes from the untrusted driver process.
const MAX_KO_BYTES: u64 = 256 << 20;

struct Function {
    start: u64,
    size: u64,
    name: String,
}

#[derive(Default)]
struct Section {
    name: String,
    /// Sorted by start.
    functions: Vec<Function>,
}

struct ModuleSymbols {
    name: String,
    text: u64,
    text_size: u64,
    /// By section index of the original `.ko`; empty if it could not be read.
    sections: Vec<Section>,
}

pub struct Symbols {
    modules: Vec<ModuleSymbols>,
    /// Sorted by ret (checked by `Region::config`).
    sites: Vec<TraceSite>,
    /// A site's index by its return address: every stub event looks its
    /// site up, and a hash is a few times cheaper than a binary search.
    by_ret: FxHashMap<u32, u32>,
}

impl Symbols {
    /// Reads each module's `.ko`; one that cannot be read is named by
    /// section index only, with a warning.
    pub fn load(modules: &[Module], sites: Vec<TraceSite>) -> Symbols {
        let modules = modules.iter().map(|m| {
            let name = std::path::Path::new(&m.path).file_name().map_or(m.path.clone(), |f| {
                f.to_string_lossy().trim_end_matches(".ko").to_string()
            });
            let sections = read_sections(&m.path).unwrap_or_else(|e| {
                log::warn!("cannot read the symbols of {}: {e}; findings in it name sections, not functions", m.path);
                Vec::new()
            });
            ModuleSymbols { name, text: m.text, text_size: m.text_size, sections }
        }).collect();
        let by_ret = sites.iter().enumerate().map(|(i, s)| (s.ret, i as u32)).collect();
        Symbols { modules, sites, by_ret }
    }

    /// The site whose stub returns to `ret`.
    pub fn site(&self, ret: u32) -> Option<&TraceSite> {
        self.by_ret.get(&ret).map(|&i| &self.sites[i as usize])
    }

    /// The module whose loaded image holds `address`.
    fn module_at(&self, address: u64) -> Option<(usize, &ModuleSymbols)> {
        self.modules.iter().enumerate().find(|(_, m)| address >= m.text && address - m.text < m.text_size)
    }

    /// Whether `address` lies in a module's image (its code and data).
    pub fn in_module_image(&self, address: u64) -> bool {
        self.module_at(address).is_some()
    }

    /// Whether any byte of [start, start + size) lies in a module's image.
    pub fn overlaps_module_image(&self, start: u64, size: u64) -> bool {
        let end = start.saturating_add(size);
        self.modules.iter().any(|m| start < m.text.saturating_add(m.text_size) && m.text < end)
    }

    /// The function holding `offset` in `section` of module `module`, and
    /// the offset in it.
    fn function(&self, module: usize, section: u16, offset: u64) -> Option<(&str, u64)> {
        let functions = &self.modules.get(module)?.sections.get(section as usize)?.functions;
        let f = &functions[..functions.partition_point(|f| f.start <= offset)].last()?;
        (f.size == 0 || offset < f.start + f.size).then(|| (f.name.as_str(), offset - f.start))
    }

    fn section_name(&self, module: usize, section: u16) -> String {
        self.modules.get(module).and_then(|m| m.sections.get(section as usize))
            .map_or_else(|| format!("section#{section}"), |s| s.name.clone())
    }

    /// A site as the JSON the findings carry (checker/README.md, "Output").
    pub fn describe(&self, site: SiteRef) -> Value {
        match site {
            SiteRef::Stub(ret) => self.describe_stub(ret),
            SiteRef::Runtime(address) => self.describe_code(address as u64),
        }
    }

    fn describe_stub(&self, ret: u32) -> Value {
        let Some(s) = self.site(ret) else {
            return self.describe_code(ret as u64);
        };
        let module = s.module as usize;
        let function = self.function(module, s.section, s.offset as u64);
        json!({
            "module": self.modules[module].name,
            "function": function.map(|(name, _)| name),
            "offset": function.map(|(_, off)| format!("{off:#x}")),
            "section": self.section_name(module, s.section),
            "section_offset": format!("{:#x}", s.offset),
            "address": format!("{ret:#x}"),
        })
    }

    /// An address in a loaded image: a runtime call site or a handler.
    pub fn describe_code(&self, address: u64) -> Value {
        let Some((index, m)) = self.module_at(address) else {
            return json!({ "module": null, "function": null, "offset": null, "address": format!("{address:#x}") });
        };
        json!({
            "module": m.name,
            "function": self.enclosing_function(index, address),
            "offset": null,
            "image_offset": format!("{:#x}", address - m.text),
            "address": format!("{address:#x}"),
        })
    }

    /// The function of module `index` the stub sites around `address` agree on.
    fn enclosing_function(&self, index: usize, address: u64) -> Option<&str> {
        let split = self.sites.partition_point(|s| (s.ret as u64) <= address);
        let name = |s: &TraceSite| {
            (s.module as usize == index).then(|| self.function(index, s.section, s.offset as u64)).flatten()
                .map(|(name, _)| name)
        };
        let before = name(self.sites.get(split.checked_sub(1)?)?)?;
        let after = name(self.sites.get(split)?)?;
        (before == after).then_some(before)
    }
}

/// The sections of the `.ko` at `path` with their STT_FUNC symbols.
fn read_sections(path: &str) -> Result<Vec<Section>, String> {
    // O_NONBLOCK: the path is the driver's to choose, and a FIFO must not
    // hang the checker; only a regular file of bounded size is read.
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)
        .map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() || meta.len() > MAX_KO_BYTES {
        return Err(format!("not a regular file of at most {MAX_KO_BYTES} bytes"));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    File::take(file, MAX_KO_BYTES).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    let elf = object::File::parse(&*bytes).map_err(|e| format!("not an ELF object: {e}"))?;
    let mut sections: Vec<Section> = Vec::new();
    for s in elf.sections() {
        let i = s.index().0;
        if sections.len() <= i {
            sections.resize_with(i + 1, Section::default);
        }
        sections[i].name = s.name().unwrap_or("?").to_string();
    }
    for sym in elf.symbols() {
        let (Some(section), SymbolKind::Text, Ok(name)) = (sym.section_index(), sym.kind(), sym.name()) else {
            continue;
        };
        if let Some(s) = sections.get_mut(section.0).filter(|_| !name.is_empty()) {
            // In a relocatable object a symbol's value is its offset in its section.
            s.functions.push(Function { start: sym.address(), size: sym.size(), name: name.to_string() });
        }
    }
    for s in &mut sections {
        s.functions.sort_by_key(|f| f.start);
    }
    Ok(sections)
}

// SPDX-License-Identifier: GPL-2.0
//! Which module files drive a device, found as modprobe finds them: the
//! device's modalias matched against a module tree's `modules.alias`, and
//! the dependencies from its `modules.dep`, loaded first. A driver of a bus
//! of its own (virtio_net) comes after the PCI driver that puts its device
//! on that bus (virtio_pci), as the kernel would have loaded both.

use std::path::{Path, PathBuf};

/// The module tree (`lib/modules/<release>/`, where `modules.dep` is) that holds `module`.
pub fn tree_of(module: &Path) -> Result<PathBuf, String> {
    module.ancestors().skip(1).find(|dir| dir.join("modules.dep").is_file()).map(Path::to_path_buf)
        .ok_or_else(|| format!("{} is in no module tree (no modules.dep above it): name the modules", module.display()))
}

/// A module's file and its dependencies' (`modules.dep`), dependencies first.
pub fn with_dependencies(module: &Path) -> Result<Vec<String>, String> {
    let tree = tree_of(module)?;
    let inside = module.strip_prefix(&tree).expect("tree_of is an ancestor");
    let deps = read(&tree, "modules.dep")?;
    let line = deps.lines()
        .find_map(|l| l.split_once(':').filter(|(m, _)| Path::new(m) == inside).map(|(_, d)| d.to_string()))
        .ok_or_else(|| format!("{} is not in {}/modules.dep", inside.display(), tree.display()))?;
    // modules.dep lists the dependencies in the order modprobe removes them: load them in reverse.
    let mut chain = Vec::new();
    for dep in line.split_whitespace().rev().map(|d| tree.join(d)) {
        // Refused here, before any device is touched, rather than by the loader mid-start.
        if !dep.is_file() {
            return Err(format!("{} needs {} (modules.dep), which is missing: the module tree is incomplete \
                                (reinstall the kernel's modules)", inside.display(), dep.display()));
        }
        chain.push(dep.display().to_string());
    }
    chain.push(module.display().to_string());
    Ok(chain)
}

/// The chain that runs `module` on the PCI device `address`: its own
/// (`modules.dep`), after the chain of the module that claims the PCI
/// function if `module` claims no PCI device itself (virtio_net's aliases
/// are `virtio:` ones: virtio_pci, which claims the function, must be
/// there to put the device on the virtio bus).
pub fn for_driver(module: &Path, address: &str) -> Result<Vec<String>, String> {
    let own = with_dependencies(module)?;
    let tree = tree_of(module)?;
    let name = module_name(&module.display().to_string());
    if drives_pci(&read(&tree, "modules.alias")?, &name) {
        return Ok(own);
    }
    Ok(transport_first(for_device(&tree, address)?, own))
}

/// The transport's chain, then the driver's modules it does not have already.
fn transport_first(mut chain: Vec<String>, own: Vec<String>) -> Vec<String> {
    for m in own {
        if !chain.contains(&m) {
            chain.push(m);
        }
    }
    chain
}

/// Whether `name` has a PCI alias (`alias pci:... NAME`): it is a PCI driver.
fn drives_pci(aliases: &str, name: &str) -> bool {
    aliases.lines().filter_map(|l| l.strip_prefix("alias ")?.split_once(' '))
        .any(|(pattern, n)| n == name && pattern.starts_with("pci:"))
}

/// The module that drives the PCI device `address` in the tree `tree`, with
/// its dependencies. Exactly one module must claim it: when several do (an
/// RTL8139's alias is 8139too's and 8139cp's) the user names one.
pub fn for_device(tree: &Path, address: &str) -> Result<Vec<String>, String> {
    let sysfs = Path::new("/sys/bus/pci/devices").join(address).join("modalias");
    let modalias = std::fs::read_to_string(&sysfs).map_err(|e| format!("{}: {e}", sysfs.display()))?;
    let names = claimants(&read(tree, "modules.alias")?, modalias.trim());
    let name = match names.as_slice() {
        [one] => one,
        [] => return Err(format!("no module in {} claims {address} ({})", tree.display(), modalias.trim())),
        many => return Err(format!("several modules claim {address}: {}; name one with --module", many.join(", "))),
    };
    let file = read(tree, "modules.dep")?.lines()
        .filter_map(|l| l.split_once(':').map(|(m, _)| m.to_string()))
        .find(|m| module_name(m) == *name)
        .ok_or_else(|| format!("{name} claims {address} but is not in {}/modules.dep", tree.display()))?;
    with_dependencies(&tree.join(file))
}

/// The modules whose alias patterns (`alias PATTERN NAME`, fnmatch) match `modalias`, each once.
fn claimants(aliases: &str, modalias: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for (pattern, name) in aliases.lines().filter_map(|l| l.strip_prefix("alias ")?.split_once(' ')) {
        let matches = glob::Pattern::new(pattern).is_ok_and(|p| p.matches(modalias));
        if matches && !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
    }
    names
}

/// A module's name as modules.alias says it: its file's stem, `-` read as `_`.
fn module_name(file: &str) -> String {
    let base = file.rsplit('/').next().unwrap_or(file);
    base.split(".ko").next().unwrap_or(base).replace('-', "_")
}

fn read(tree: &Path, name: &str) -> Result<String, String> {
    std::fs::read_to_string(tree.join(name)).map_err(|e| format!("{}: {e}", tree.join(name).display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALIASES: &str = "alias pci:v000010ECd00008139sv*sd*bc*sc*i* 8139too\n\
                           alias pci:v000010ECd00008139sv*sd*bc*sc*i* 8139cp\n\
                           alias pci:v00008086d0000100Esv*sd*bc*sc*i* e1000\n\
                           alias pci:v00008086d0000100Esv*sd*bc*sc*i* e1000\n";

    #[test]
    fn a_device_is_claimed_by_the_modules_whose_patterns_match_its_modalias() {
        let e1000 = "pci:v00008086d0000100Esv00001AF4sd00001100bc02sc00i00";
        assert_eq!(claimants(ALIASES, e1000), vec!["e1000"]);
        let rtl = "pci:v000010ECd00008139sv00001AF4sd00001100bc02sc00i00";
        assert_eq!(claimants(ALIASES, rtl), vec!["8139too", "8139cp"]);
        assert!(claimants(ALIASES, "pci:v00001022d00002000sv0sd0bc02sc00i00").is_empty());
    }

    #[test]
    fn a_driver_of_another_bus_comes_after_the_transport_that_claims_the_function() {
        let aliases = "alias pci:v00001AF4d*sv*sd*bc*sc*i* virtio_pci\n\
                       alias virtio:d00000001v* virtio_net\n";
        assert!(drives_pci(aliases, "virtio_pci") && !drives_pci(aliases, "virtio_net"));
        let s = |v: &[&str]| v.iter().map(|m| m.to_string()).collect::<Vec<_>>();
        let transport = s(&["ring.ko", "virtio.ko", "virtio_pci.ko"]);
        let own = s(&["ring.ko", "virtio.ko", "failover.ko", "virtio_net.ko"]);
        assert_eq!(transport_first(transport, own),
                   s(&["ring.ko", "virtio.ko", "virtio_pci.ko", "failover.ko", "virtio_net.ko"]));
    }

    #[test]
    fn dependencies_load_first_in_the_reverse_of_modules_dep() {
        let tree = std::env::temp_dir().join(format!("understudy-modtree-{}", std::process::id()));
        let dir = tree.join("kernel/drivers/net");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir_all(tree.join("kernel/lib")).unwrap();
        std::fs::write(tree.join("modules.dep"),
                       "kernel/drivers/net/a-b.ko: kernel/drivers/net/mii.ko kernel/lib/crc.ko\nkernel/drivers/net/mii.ko:\n")
            .unwrap();
        for file in ["kernel/drivers/net/a-b.ko", "kernel/drivers/net/mii.ko", "kernel/lib/crc.ko"] {
            std::fs::write(tree.join(file), b"").unwrap();
        }
        let chain = with_dependencies(&dir.join("a-b.ko")).unwrap();
        let t = tree.display();
        assert_eq!(chain, vec![format!("{t}/kernel/lib/crc.ko"), format!("{t}/kernel/drivers/net/mii.ko"),
                               format!("{t}/kernel/drivers/net/a-b.ko")]);
        assert_eq!(module_name("kernel/drivers/net/a-b.ko"), "a_b");
        assert!(with_dependencies(&dir.join("missing.ko")).unwrap_err().contains("is not in"));
        std::fs::remove_file(tree.join("kernel/lib/crc.ko")).unwrap();
        let missing = with_dependencies(&dir.join("a-b.ko")).unwrap_err();
        assert!(missing.contains("kernel/drivers/net/a-b.ko needs") && missing.contains("kernel/lib/crc.ko (modules.dep), which is missing"),
                "{missing}");
        std::fs::remove_dir_all(&tree).unwrap();
    }
}

//! Reading cgroup mounts from /proc/self/mountinfo.

use std::path::PathBuf;

#[derive(Clone, Debug)]
pub struct CgroupMount {
    pub path: PathBuf,
    pub v2: bool,
    /// v1 controllers bound to this mount (from the super options).
    pub controllers: Vec<String>,
}

pub fn cgroup_mounts() -> std::io::Result<Vec<CgroupMount>> {
    Ok(parse(&std::fs::read_to_string("/proc/self/mountinfo")?))
}

/// Lines look like `36 25 0:31 / /sys/fs/cgroup/memory rw,relatime shared:14 - cgroup cgroup rw,memory`.
pub fn parse(text: &str) -> Vec<CgroupMount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mount_point = left.split_whitespace().nth(4)?;
            let mut r = right.split_whitespace();
            let fstype = r.next()?;
            let _source = r.next()?;
            let options = r.next().unwrap_or("");
            let path = PathBuf::from(mount_point.replace("\\040", " "));
            match fstype {
                "cgroup2" => Some(CgroupMount {
                    path,
                    v2: true,
                    controllers: vec![],
                }),
                "cgroup" => Some(CgroupMount {
                    path,
                    v2: false,
                    controllers: options
                        .split(',')
                        .filter(|o| !matches!(*o, "rw" | "ro") && !o.contains('='))
                        .map(str::to_string)
                        .collect(),
                }),
                _ => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hybrid_layout() {
        let m = parse(
            "30 25 0:26 / /sys/fs/cgroup/unified rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n\
             31 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw shared:5 - cgroup cgroup rw,cpu,cpuacct\n\
             32 25 0:28 / /sys/fs/cgroup/systemd rw shared:6 - cgroup cgroup rw,xattr,name=systemd\n\
             33 25 0:29 / /proc rw shared:7 - proc proc rw\n",
        );
        assert_eq!(m.len(), 3);
        assert!(m[0].v2);
        assert_eq!(m[1].controllers, vec!["cpu", "cpuacct"]);
        assert_eq!(m[2].controllers, vec!["xattr"]);
    }
}

//! Admin commands on YTsaurus paths (`create`, `get`, `set`, `list`, `remove`, `exists`)
//! and `simulate`, which runs the scheduler core locally without any server.

use crate::output::Format;
use async_nats::Client;
use clap::{Args, ValueEnum};
use ytsched_common::api::{
    AdminChange, AdminCreate, AdminExists, AdminGet, AdminList, AdminRemove, AdminSet, AdminWhatIf,
    ApiMethod, ObjectType,
};
use ytsched_common::identity::Caller;
use ytsched_common::names::{PoolName, TreeName};
use ytsched_common::subjects::Subjects;
use ytsched_common::transport::call;
use ytsched_common::yson::parse_value;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum CreateType {
    SchedulerPool,
    SchedulerPoolTree,
}

#[derive(Args, Debug)]
pub struct CreateArgs {
    /// What to create.
    #[arg(value_enum)]
    object_type: CreateType,
    /// The new pool's or tree's name.
    #[arg(long)]
    name: String,
    /// Parent pool (default: the tree's root).
    #[arg(long)]
    parent_name: Option<PoolName>,
    /// Pool tree of a new pool (default: //sys/pool_trees/@default_tree).
    #[arg(long)]
    pool_tree: Option<TreeName>,
    /// Attributes as JSON or YSON text, e.g. '{weight=2;strong_guarantee_resources={cpu=4}}'.
    #[arg(long)]
    attributes: Option<String>,
    /// Print every fair share the new pool or tree would move; create nothing.
    #[arg(long)]
    dry_run: bool,
}

/// Parses a value typed on the command line, exiting with status 2 if it is malformed.
pub fn parse_value_or_exit(text: &str) -> serde_json::Value {
    match parse_value(text) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
}

/// Who talks to which scheduler: what every admin call needs.
pub struct Session<'a> {
    pub client: &'a Client,
    pub subjects: &'a Subjects,
    pub user: &'a Caller,
}

impl Session<'_> {
    pub async fn call<M: ApiMethod>(&self, body: M) -> anyhow::Result<M::Response> {
        Ok(call(self.client, self.subjects, self.user, body).await?)
    }

    async fn default_tree(&self) -> anyhow::Result<TreeName> {
        let text = self
            .call(AdminGet {
                path: "//sys/pool_trees/@default_tree".into(),
            })
            .await?;
        match serde_json::from_str::<serde_json::Value>(&text)? {
            serde_json::Value::String(t) => TreeName::parse(&t).map_err(anyhow::Error::msg),
            _ => anyhow::bail!("no default pool tree is set; pass --pool-tree"),
        }
    }

    pub async fn create(&self, args: CreateArgs, format: Format) -> anyhow::Result<()> {
        let attributes = args
            .attributes
            .as_deref()
            .map(|a| parse_value_or_exit(a).to_string());
        let (object_type, pool_tree) = match args.object_type {
            CreateType::SchedulerPoolTree => (ObjectType::SchedulerPoolTree, None),
            CreateType::SchedulerPool => {
                let tree = match args.pool_tree {
                    Some(t) => t,
                    None => self.default_tree().await?,
                };
                (ObjectType::SchedulerPool, Some(tree))
            }
        };
        let create = AdminCreate {
            object_type,
            name: args.name.clone(),
            parent_name: args.parent_name,
            pool_tree,
            attributes,
        };
        if args.dry_run {
            return self.what_if(AdminChange::Create(create), format).await;
        }
        self.call(create).await?;
        eprintln!("created {}", args.name);
        Ok(())
    }

    /// `--dry-run`: the fair shares the change would move, as a table or JSON/YAML.
    pub async fn what_if(&self, change: AdminChange, format: Format) -> anyhow::Result<()> {
        let what_if = self.call(AdminWhatIf { change }).await?;
        if what_if.changes.is_empty() && format == Format::Table {
            eprintln!("dry run: no fair share would change");
            return Ok(());
        }
        crate::output::print(&what_if, format)?;
        if format == Format::Table {
            eprintln!("dry run: nothing was changed");
        }
        Ok(())
    }

    pub async fn get(&self, path: String, format: Format) -> anyhow::Result<()> {
        let text = self.call(AdminGet { path }).await?;
        print_value(&serde_json::from_str(&text)?, format)
    }

    pub async fn set(&self, path: String, value: serde_json::Value) -> anyhow::Result<()> {
        let value = value.to_string();
        self.call(AdminSet { path, value }).await
    }

    pub async fn list(&self, path: String, format: Format) -> anyhow::Result<()> {
        let names = self.call(AdminList { path }).await?;
        match format {
            Format::Table => names.iter().for_each(|n| println!("{n}")),
            f => print_value(&serde_json::json!(names), f)?,
        }
        Ok(())
    }

    pub async fn remove(&self, path: String) -> anyhow::Result<()> {
        self.call(AdminRemove { path }).await
    }

    pub async fn exists(&self, path: String) -> anyhow::Result<()> {
        println!("{}", self.call(AdminExists { path }).await?);
        Ok(())
    }
}

fn print_value(value: &serde_json::Value, format: Format) -> anyhow::Result<()> {
    match format {
        Format::Yaml => print!("{}", serde_yaml_ng::to_string(value)?),
        Format::Json => println!("{}", serde_json::to_string_pretty(value)?),
        Format::Csv => return Err(crate::output::no_csv()),
        // For people: a string prints bare, anything else as JSON.
        Format::Table => match value {
            serde_json::Value::String(s) => println!("{s}"),
            v if !v.is_object() && !v.is_array() => println!("{v}"),
            v => println!("{}", serde_json::to_string_pretty(v)?),
        },
    }
    Ok(())
}

/// Runs a scenario and prints its JSON; an unreadable or invalid scenario exits 2.
pub fn simulate(path: &std::path::Path) -> ! {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: cannot read {}: {e}", path.display());
            std::process::exit(2);
        }
    };
    match ytsched_simulator::run_text(&text) {
        Ok(out) => {
            println!("{out}");
            std::process::exit(0);
        }
        Err(e) => {
            eprintln!("error: {}: {e}", path.display());
            std::process::exit(2);
        }
    }
}

//! What the BQBS paper (seed 000, in Chinese) says about its Tables 5 to 8. The paper's text
//! describes each table in prose; the tables' cells are not in the text, so only the figures
//! the prose states are here, each with the sentence it comes from. They are shown in the
//! report's "paper" columns, labelled as the paper's; nothing here is a Weir measurement.

/// A statement of the paper: the original sentence and an English rendering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quote {
    /// The sentence as the paper has it.
    pub original: &'static str,
    /// An English rendering.
    pub english: &'static str,
}

/// The paper's setup (Section 4 text).
pub const SETUP: Quote = Quote {
    original: "本实验所有计算的并行度为8，每个TaskManager所拥有的slot数为8，根据需求使用Flink中的Source、Connect、FlatMap、Filter、Map、Sink算子进行运算. 主要选择10、50、100万3个不同数据量的信息进行对比.",
    english: "All operators run at parallelism 8, 8 slots per TaskManager, with Flink's Source, \
              Connect, FlatMap, Filter, Map and Sink operators (Kafka in, Redis for the level \
              mapping, Kafka out, Flume to HDFS); 100k, 500k and 1M records.",
};

/// Table 5: criticality.
pub const TABLE5: Quote = Quote {
    original: "为算子注入50次故障后各自的平均恢复时间T_R如表5所示. Checkpoint的间隔为30 s，由表5可以看出，本次任务的FlatMap较为关键",
    english: "Table 5 gives each operator's mean recovery time T_R after 50 injected faults, \
              checkpoint interval 30 s; FlatMap is the most critical operator. (The table's \
              per-operator times are not in the text.)",
};

/// Table 6: latency.
pub const TABLE6: Quote = Quote {
    original: "当数据量在100万以下时，与Flink原来的处理延迟没有太大差别；当数据量超过100万时，使用本研究所提出的策略后处理时间会比Flink原本的略高，约会产生4%的额外时延",
    english: "Checkpoint interval 30 s. Below 1M records, no great difference from Flink's own \
              latency; from 1M records on, about 4% extra latency with BQBS on FlatMap. (The \
              table's latencies are not in the text.)",
};

/// The overhead Table 6's text states at 1M records, percent.
pub const TABLE6_OVERHEAD_PCT_AT_1M: f64 = 4.0;

/// Table 7: recovery.
pub const TABLE7: Quote = Quote {
    original: "在Flink-RestartAll模式下每发生一次故障，平均恢复时间约为70 s，其中任务重载时间约为30 s ... 当第1次出现故障时，平均故障恢复时间为31 s，效果提升了56.3%，在第2次出现故障后恢复时间与Flink基于Checkpoint的全局卷回策略第1次发生故障的恢复时间大致相同，平均为73 s. 当第4次出现故障后，恢复时间约为157 s，也远好于同等故障下Flink-RestartAll的累计故障恢复时间.",
    english: "Four process-level faults injected into FlatMap's node. Restart-all: about 70 s per \
              failure, about 30 s of it reloading the job. BQBS: 31 s at the 1st failure (56.3% \
              better); after the 2nd about 73 s, about restart-all's first; after the 4th about \
              157 s, far better than restart-all's cumulative time for as many failures. (The \
              table's cells are not in the text; 73 s and 157 s read as cumulative.)",
};

/// The paper's conclusion on restart time.
pub const RESTART_RATIO: Quote = Quote {
    original: "Flink-BQBS在任务出现故障后重启的时间缩短为Flink Restart-all恢复模式的1/6.",
    english: "BQBS's restart time after a failure is 1/6 of restart-all's.",
};

/// Table 7 as the text states it: `(failure, restart-all per failure, BQBS per failure,
/// BQBS cumulative)`, as text (`—` where the text gives nothing).
pub const TABLE7_ROWS: [(usize, &str, &str, &str); 4] = [
    (1, "≈70 s", "31 s", "31 s"),
    (2, "≈70 s", "—", "≈73 s"),
    (3, "≈70 s", "—", "—"),
    (4, "≈70 s", "—", "≈157 s"),
];

/// Table 8: CPU and memory.
pub const TABLE8: Quote = Quote {
    original: "在正常情况下，本研究策略与Flink的CPU利用率基本相似，在出现故障时，本研究提出的算法会导致更高的CPU利用率，大致会消耗8%的CPU ... Flink-RestartAll将会占用40.01%的内存，Flink-BQBS会占用42.70%的内存",
    english: "η_n (CPU, normal running): about the same for both. η_f (CPU during a failure): \
              BQBS uses about 8% more CPU. δ (memory use): restart-all 40.01%, BQBS 42.70%. \
              (The CPU cells of Table 8 are not in the text.)",
};

/// δ of Table 8: restart-all, BQBS (percent of the machine's memory).
pub const TABLE8_MEMORY_PCT: (f64, f64) = (40.01, 42.70);

/// η_f difference stated for BQBS (percent of CPU).
pub const TABLE8_CPU_FAILURE_EXTRA_PCT: f64 = 8.0;

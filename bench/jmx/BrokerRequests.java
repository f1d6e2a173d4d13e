// java bench/jmx/BrokerRequests.java PORT: the broker's own request counters over JMX, one
// "requests<TAB>type<TAB>count" line per request type (summed over versions), then
// "messages_in<TAB>count" and "bytes_in<TAB>count". Run by bench/broker_metrics.py.
import java.util.Map;
import java.util.TreeMap;
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

public class BrokerRequests {
    public static void main(String[] args) throws Exception {
        JMXServiceURL url = new JMXServiceURL(
            "service:jmx:rmi:///jndi/rmi://127.0.0.1:" + Integer.parseInt(args[0]) + "/jmxrmi");
        try (JMXConnector connector = JMXConnectorFactory.connect(url)) {
            MBeanServerConnection server = connector.getMBeanServerConnection();
            Map<String, Long> requests = new TreeMap<>();
            ObjectName pattern = new ObjectName(
                "kafka.network:type=RequestMetrics,name=RequestsPerSec,*");
            for (ObjectName name : server.queryNames(pattern, null)) {
                long count = ((Number) server.getAttribute(name, "Count")).longValue();
                requests.merge(name.getKeyProperty("request"), count, Long::sum);
            }
            for (Map.Entry<String, Long> e : requests.entrySet()) {
                System.out.println("requests\t" + e.getKey() + "\t" + e.getValue());
            }
            for (String metric : new String[] {"MessagesInPerSec", "BytesInPerSec"}) {
                ObjectName name = new ObjectName(
                    "kafka.server:type=BrokerTopicMetrics,name=" + metric);
                long count = ((Number) server.getAttribute(name, "Count")).longValue();
                System.out.println((metric.startsWith("Messages") ? "messages_in" : "bytes_in")
                    + "\t" + count);
            }
        }
    }
}

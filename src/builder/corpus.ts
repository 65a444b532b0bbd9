// The English text the embedded tokenizer's BPE merges are learned from. Written for this project; plain prose
// on everyday topics, with numbers, punctuation, contractions and a little dialogue, so merges look like English.

export const CORPUS = `The morning was cold and clear. Anna walked to the station with her brother, who talked about the train the whole way. "It will be late again," he said. "It is always late on Mondays." She laughed and told him that he had said the same thing last week, and the train had been early.

At the market, people were already setting up their tables. There were apples, pears, potatoes, onions, bread, cheese, fresh fish and flowers of every color. An old man sold honey in small glass jars. He said his bees lived in the hills behind the town, where the air was clean and the grass was full of wild thyme. Anna bought two jars, one for her mother and one for herself.

The city has grown quickly over the last twenty years. In 2004 it had about 80,000 people; today it has more than 150,000. New houses have been built along the river, and a second bridge was opened in 2019. Some people say the city has lost its character, while others think it has finally become a place where young families want to live. Both may be right.

How to make a simple soup: first, chop one onion, two carrots and a stalk of celery. Warm a spoon of oil in a large pot and cook the vegetables slowly for ten minutes, until they are soft but not brown. Add a liter of water or stock, a handful of lentils, salt and pepper. Let it simmer for thirty minutes. Taste it, add a little lemon juice, and serve it with bread. It keeps well in the fridge for three days.

Computers do exactly what they are told, which is not always what we want. A program is a list of instructions, written in a language the machine can follow. When something goes wrong, the first step is to read the error message carefully. It often tells you the file, the line and the reason. The second step is to make the problem smaller: remove everything that is not needed until the mistake is easy to see. Good programmers are not people who never make mistakes; they are people who have learned how to find them.

Water boils at 100 degrees Celsius at sea level, but at lower temperatures high in the mountains, because the air pressure is lower there. That is why cooking rice or pasta takes longer at altitude. The same idea explains why a pressure cooker works so well: by raising the pressure, it raises the boiling point, and food cooks faster at the higher temperature.

"Do you remember the summer we spent by the lake?" asked Thomas. "Of course," said his sister. "You fell out of the boat on the first day, and you wouldn't go near the water again for a week." "That's not how I remember it," he said. "I jumped, and I was very brave." They both knew that wasn't true, but neither of them said so.

The library opens at nine o'clock and closes at six, except on Sundays, when it is closed all day. Members may borrow up to eight books at a time for three weeks. Children's books are on the ground floor, next to the reading room; history, science and travel are upstairs. If you can't find what you're looking for, please ask at the front desk. We'll be happy to help.

Birds begin to sing before the sun rises. In spring the garden is loud with them: blackbirds, robins, sparrows, finches and, now and then, a woodpecker knocking on the old apple tree. By midday they are quieter, and in the heat of the afternoon you hear only bees and the wind in the leaves. In the evening the singing starts again, softer, until the light is gone.

A good night's sleep matters more than most people think. Adults need between seven and nine hours, and teenagers need even more. Light from screens late at night can make it harder to fall asleep, and so can coffee in the afternoon. Going to bed and getting up at the same time every day, even at weekends, is one of the simplest ways to sleep better.

Maria opened the letter slowly. It was from the university. She read the first line twice before she understood it: she had been accepted. She ran into the kitchen, where her father was reading the newspaper, and held the letter in front of his face. He put down the paper, read it, and then he stood up and hugged her without saying a word.

Numbers are everywhere: 1, 2, 3, 10, 12, 25, 50, 99, 100, 365, 1000, 2024 and 3.14. Prices are written like $4.99 or 12.50 euros, times like 7:30 or 18:45, and dates like 12 March 2021 or 2021-03-12. Phone numbers, postcodes and passwords are numbers too, in a way, though we never add them together.

The company announced on Tuesday that it would open three new offices next year, in Lisbon, Warsaw and Toronto. The chief executive said the move would create about 400 jobs and bring the firm closer to its customers. Shares rose by 2 percent after the news. Analysts were cautious, however, and noted that the market had been difficult for most of the past year.

When you travel by plane, pack the things you need most in your hand luggage: your passport, a change of clothes, any medicine you take, a charger and something to read. Arrive at the airport early. Drink plenty of water during the flight, walk along the aisle from time to time, and try to sleep if it is night at the place where you are going.

The river was wide and slow, and the water was brown after the rain. A small ferry carried cars and people from one bank to the other. On the far side there was a village with a church, a bakery, a school and a few dozen houses with red roofs. Children waved at the ferry as it arrived, and the captain always waved back.

Learning a new language takes time and patience. It helps to listen every day, even for a few minutes, and to speak as soon as you can, without worrying too much about mistakes. Reading simple stories, writing short notes and talking with friends who speak the language are all useful. Little by little, the words start to make sense, and one day you notice that you are thinking in the new language without trying.

The weather report for tomorrow: cloudy in the morning with some light rain in the north, clearing in the afternoon. Temperatures between 12 and 17 degrees. Winds from the west, moderate, becoming strong near the coast in the evening. Over the weekend it will be dry and warmer, with sunshine and highs of up to 24 degrees.

Questions to think about: Why do we remember some days clearly and forget others completely? What makes a city feel friendly? Is it better to know a little about many things, or a lot about a few? Which books would you take with you to an island, and why? There are no right answers, only better and worse reasons.

He repaired the bicycle himself. He replaced the chain, tightened the brakes, pumped up the tires and oiled every moving part. It took the whole afternoon and his hands were black with grease, but when he rode it down the hill the next morning it was quiet and smooth, and he felt prouder than he had in years.

Our team meets every Thursday at ten. Each person says what they finished last week, what they plan to do this week and whether anything is blocking them. The meeting should never take longer than fifteen minutes. Longer discussions happen afterwards, with only the people who need to be there.

In the end, the storm passed without much damage. A few trees were down, some roads were flooded for a day, and the power was off in parts of the town until the evening. Neighbors helped each other clear the branches and checked on the older people living alone. By the weekend, life was back to normal, and the sky was blue again.

Football is played by two teams of eleven players on a rectangular field. Each team tries to score by kicking the ball into the opposing goal, and only the goalkeeper may touch the ball with the hands. A match lasts ninety minutes, divided into two halves, with a short break in between. Supporters sing, shout and wave scarves; after a victory, the celebrations in the streets can continue long into the night.

Doctors recommend regular exercise for almost everyone. Walking briskly, swimming, cycling, dancing or gardening for thirty minutes on most days strengthens the heart and lungs, improves mood and helps people keep a healthy weight. Stretching keeps the muscles flexible, and lifting light weights protects the bones as we grow older. The important thing is to choose an activity you enjoy, so that you keep doing it.

The ancient harbor was protected by a stone wall, and merchants arrived from distant countries with silk, spices, copper, wine and olive oil. Archaeologists have discovered coins, pottery, anchors and the wooden frames of several ships buried in the mud. Their careful excavations suggest that the harbor was abandoned suddenly, perhaps after an earthquake, around the fourth century.

Electric cars are becoming more common. They are quiet, they produce no exhaust, and charging them at home overnight is usually cheaper than filling a tank with petrol. Their batteries are still expensive, however, and drivers on long journeys must plan where to stop and recharge. Engineers are working on lighter batteries, faster chargers and vehicles that can travel further on a single charge.

Grandmother kept a notebook of recipes, remedies and advice. Between instructions for plum jam and ginger biscuits, she had written things like: "Never argue when you are hungry." "Open the windows every morning, even in winter." "Always thank the person who cooked." The handwriting grew shakier toward the last pages, but the advice stayed just as firm.

Volcanoes form where molten rock, called magma, rises through cracks in the earth's crust. When the pressure becomes too great, the volcano erupts, throwing ash, gas and lava into the air. Some eruptions are gentle, with rivers of glowing lava flowing slowly downhill; others are violent explosions that can darken the sky for days. Scientists monitor earthquakes, gases and tiny changes in the shape of the ground to warn nearby communities.

The museum's newest exhibition shows photographs of ordinary kitchens from around the world: a farmhouse in Norway, an apartment in Seoul, a village in Kenya, a student flat in Buenos Aires. Visitors linger in front of the pictures, comparing kettles, cupboards, calendars and the objects people place on their windowsills. Everybody seems to recognize something of their own home.

Please remember to switch off the lights, close the windows, lock the door and leave the key under the blue flowerpot. The cat should be fed twice a day, morning and evening, and the plants watered on Wednesday and Saturday. If anything unusual happens, telephone me immediately; otherwise, enjoy the quiet, and help yourself to anything in the refrigerator.
`
